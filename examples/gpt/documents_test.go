package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"megago/data"
	"megago/internal/fakedev"
	"megago/tensor"
)

// gosourceEOD is the end-of-document id of the default tokenizer (gosource-bpe).
const gosourceEOD = 8191

// shortDocuments writes a dataset of documents of 3 to 20 tokens, each ending with the
// EOD token as preprocess -append-eod writes them, so that every 32-token sample packs
// several, and returns its prefix.
func shortDocuments(t *testing.T) string {
	t.Helper()
	r := rand.New(rand.NewPCG(3, 4))
	docs := make([][]int32, 300)
	for j := range docs {
		d := make([]int32, 2+r.IntN(18))
		for i := range d {
			d[i] = int32(r.IntN(200)) // a small vocabulary in use: the model learns fast
		}
		docs[j] = append(d, gosourceEOD)
	}
	prefix := filepath.Join(t.TempDir(), "docs")
	writeDocuments(t, prefix, docs)
	return prefix
}

// docArgs are the three flags.
var docArgs = []string{"--eod-mask-loss", "--reset-position-ids", "--reset-attention-mask"}

// TestDocumentFlagsMatchOneRank trains on short documents with --eod-mask-loss,
// --reset-position-ids and --reset-attention-mask at TP=2 × PP=2 on four goroutine ranks
// (sequence parallelism, learned positions on the first stage) and with RoPE (positions
// on every stage), and compares the losses with one rank's, within the tolerance of
// TestLayoutsMatchOneRank; the flags change the losses.
func TestDocumentFlagsMatchOneRank(t *testing.T) {
	prefix := shortDocuments(t)
	base := []string{"--data-path", prefix, "--split", "90,10,0", "--train-iters", "4", "--eval-interval", "4"}
	layout := []string{"--ranks", "4", "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--sequence-parallel"}
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"learned", nil},
		{"rope", []string{"--position-embedding-type", "rope"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append(append([]string{}, base...), tc.flags...), docArgs...)
			one, out := runTiny(t, tinyArgs(t, args...))
			assert.Contains(t, out, "documents: --eod-mask-loss, --reset-position-ids, --reset-attention-mask")
			got, _ := runTiny(t, tinyArgs(t, append(args, layout...)...))
			assert.InDeltaSlice(t, one.Losses, got.Losses, layoutTol, "training losses")
			t.Logf("largest training-loss difference to one rank: %.2g", maxDiff(one.Losses, got.Losses))
			assert.InDelta(t, one.ValidLoss, got.ValidLoss, layoutTol, "validation loss")
			if tc.flags == nil {
				plain, _ := runTiny(t, tinyArgs(t, append(append([]string{}, base...), tc.flags...)...))
				assert.Greater(t, maxDiff(plain.Losses, one.Losses), 10*layoutTol, "the flags change the losses")
			}
		})
	}
}

// TestDocumentFlagsNeedEOD: with a tokenizer that has no end-of-document token (a
// Hugging Face WordPiece without eos_token), the flags stop the run before any work,
// naming the flags and the tokenizer.
func TestDocumentFlagsNeedEOD(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join("..", "..", "data", "testdata", "hf", "wordpiece")
	gz, err := os.Open(filepath.Join(src, "tokenizer.json.gz"))
	require.NoError(t, err)
	defer gz.Close()
	zr, err := gzip.NewReader(gz)
	require.NoError(t, err)
	tj, err := io.ReadAll(zr)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), tj, 0o644))
	cfg, err := os.ReadFile(filepath.Join(src, "tokenizer_config.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), cfg, 0o644))

	out := filepath.Join(t.TempDir(), "out")
	args := []string{"--cache-dir", testCache, "--out-dir", out, "--tokenizer-type", "HuggingFaceTokenizer",
		"--tokenizer-model", dir, "--data-path", shortDocuments(t), "--eod-mask-loss", "--reset-attention-mask"}
	var stdout bytes.Buffer
	_, err = run(context.Background(), args, noEnv, &stdout, io.Discard)
	require.ErrorContains(t, err, "--eod-mask-loss, --reset-attention-mask need a tokenizer with an end-of-document token; --tokenizer-type HuggingFaceTokenizer has none")
	assert.NoDirExists(t, out, "no work started")
	assert.NotContains(t, stdout.String(), "iter ")
}

// TestDocumentFlagsReachTheBatches: the flags (also from a --config file) reach the
// dataset's options, and the micro-batches carry each token's position with
// --reset-position-ids and its document when the samples hold them.
func TestDocumentFlagsReachTheBatches(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"eod-mask-loss": true, "reset-attention-mask": true}`), 0o644))
	for _, tc := range []struct {
		args []string
		want docFlags
	}{
		{nil, docFlags{}},
		{docArgs, docFlags{true, true, true}},
		{[]string{"--config", file}, docFlags{EODMaskLoss: true, ResetAttentionMask: true}},
		{[]string{"--config", file, "--reset-position-ids", "--eod-mask-loss=false"}, docFlags{ResetPositionIDs: true, ResetAttentionMask: true}},
	} {
		c, err := parseConfig(tinyArgs(t, tc.args...), 0, io.Discard)
		require.NoError(t, err)
		assert.Equal(t, tc.want, c.Docs, "%v", tc.args)
	}

	dev := tensor.NewCPU()
	b := data.GPTBatch{B: 1, T: 4, Tokens: []int32{5, gosourceEOD, 6, 7}, Labels: []int32{gosourceEOD, 6, 7, 8},
		LossMask: []float32{1, 0, 1, 1}, PositionIDs: []int32{0, 1, 0, 1}, Segments: []int32{0, 0, 1, 1}}
	for _, positions := range []bool{false, true} {
		mb := gptBatches{b}.microBatches(dev, positions, cpRank{size: 1})(0)
		assert.Equal(t, []int32{gosourceEOD, -100, 7, 8}, tensor.ToSlice[int32](mb.Labels), "the EOD input's loss is masked")
		assert.Equal(t, b.Segments, tensor.ToSlice[int32](mb.Segments))
		if positions {
			assert.Equal(t, b.PositionIDs, tensor.ToSlice[int32](mb.Positions))
		} else {
			assert.Nil(t, mb.Positions)
		}
	}
	b.Segments = nil
	assert.Nil(t, gptBatches{b}.microBatches(dev, true, cpRank{size: 1})(0).Segments)
}

// TestDocumentFlagsOnDevice: with the three flags, a run on a device that is not the
// CPU (the fake backend: a tensor left on the CPU would panic meeting the device's)
// gives the CPU's losses bit for bit, RoPE and TP=2 with sequence parallelism.
func TestDocumentFlagsOnDevice(t *testing.T) {
	args := append([]string{"--data-path", shortDocuments(t), "--split", "90,10,0", "--train-iters", "2", "--eval-iters", "0",
		"--gen-tokens", "0", "--position-embedding-type", "rope", "--ranks", "2", "--tensor-model-parallel-size", "2",
		"--sequence-parallel"}, docArgs...)
	cpu, _ := runTiny(t, tinyArgs(t, args...))
	fake, _ := runTiny(t, tinyArgs(t, append(args, "--device", fakedev.Name)...))
	assert.Equal(t, cpu.Losses, fake.Losses, "training losses")
}
