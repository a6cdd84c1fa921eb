package main

import (
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/data"
)

// TestNullTokenizer: Megatron's NullTokenizer (pre-tokenized ids, --vocab-size) trains and
// generates from the command line; the model's vocabulary is --vocab-size padded, and the
// generated text is ids.
func TestNullTokenizer(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "ids")
	r := rand.New(rand.NewPCG(1, 2))
	b, err := data.NewIndexedBuilder(prefix, data.Int32)
	require.NoError(t, err)
	for range 40 { // documents of ids below 999; 999 is the NullTokenizer's EOD
		ids := make([]int32, 100)
		for i := range ids {
			ids[i] = int32(r.IntN(999))
		}
		require.NoError(t, b.AddDocument(ids, []int{len(ids)}))
	}
	require.NoError(t, b.Finalize())
	args := tinyArgs(t, "--tokenizer-type", "NullTokenizer", "--vocab-size", "1000", "--data-path", prefix,
		"--split", "90,10,0", "--train-iters", "3", "--prompt", "1 2 3")
	sum, out := runTiny(t, args)
	require.Equal(t, 3, sum.Iterations)
	assert.Contains(t, out, "1 2 3")
	gen := out[strings.Index(out, "generated from the prompt"):]
	for _, f := range strings.Fields(gen[strings.Index(gen, "----")+4:]) {
		if f == "----" {
			break
		}
		assert.Regexp(t, `^[0-9]+$`, f, "NullTokenizer text is ids")
	}

	bad := tinyArgs(t, "--tokenizer-type", "NullTokenizer", "--data-path", prefix)
	_, err = run(t.Context(), bad, noEnv, new(strings.Builder), new(strings.Builder))
	require.ErrorContains(t, err, "--vocab-size", "NullTokenizer without --vocab-size")
}
