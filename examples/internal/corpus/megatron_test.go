package corpus

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/data"
	"megago/examples/internal/settings"
)

// TestMock: Megatron's mock documents (ids 1, ..., L−1 then EOD, lengths in [1, 4096)),
// ids wrapped below a small vocabulary, and their unigram counts from the lengths
// equal to counting every token.
func TestMock(t *testing.T) {
	m := NewMock(300, 50_000, 49_999)
	require.Equal(t, 300, m.NumSequences())
	for i := range m.NumSequences() {
		l := m.SequenceLen(i)
		require.True(t, l >= 1 && l < MockMaxLength, "length %d", l)
	}
	l := m.SequenceLen(3)
	ids := m.AppendTokens(nil, 3, 0, l)
	for k, id := range ids[:l-1] {
		require.Equal(t, int32(k+1), id)
	}
	assert.Equal(t, int32(49_999), ids[l-1])
	assert.Equal(t, m.SequenceLen(7), NewMock(20, 50_000, 0).SequenceLen(7), "the first documents do not depend on how many")

	small := NewMock(300, 100, 0)
	for _, tc := range []struct {
		m           *Mock
		first, last int
	}{{m, 10, 250}, {small, 0, 300}} {
		var want Unigram
		require.NoError(t, want.Add(tc.m, tc.first, tc.last))
		got := tc.m.Unigram(tc.first, tc.last)
		assert.Equal(t, want.Total, got.Total)
		assert.Equal(t, want.Counts, got.Counts[:len(want.Counts)])
	}
	for _, id := range small.AppendTokens(nil, 5, 0, small.SequenceLen(5)) {
		assert.Less(t, id, int32(100))
	}
}

// indexed writes an indexed dataset of docs documents of n tokens each.
func indexed(t *testing.T, prefix string, docs, n int) *data.IndexedDataset {
	t.Helper()
	b, err := data.NewIndexedBuilder(prefix, data.Int32)
	require.NoError(t, err)
	for d := range docs {
		doc := make([]int32, n)
		for i := range doc {
			doc[i] = int32((d + i) % 50)
		}
		require.NoError(t, b.AddDocument(doc, []int{n}))
	}
	require.NoError(t, b.Finalize())
	ds, err := data.OpenIndexed(prefix, data.ReadMmap)
	require.NoError(t, err)
	t.Cleanup(func() { ds.Close() })
	return ds
}

// TestBlendBySize: --data-path prefixes without weights are blended as Megatron's
// BlendedMegatronDatasetBuilder does: each dataset built for one epoch and weighted by
// its samples; a run that needs more samples builds each again for its share.
func TestBlendBySize(t *testing.T) {
	dir := t.TempDir()
	small, large := indexed(t, filepath.Join(dir, "small"), 10, 33), indexed(t, filepath.Join(dir, "large"), 30, 33)
	gc := data.GPTConfig{SeqLen: 32, Seed: 1, Split: "1,0,0"}
	var calls [][2]int // (source, samples)
	build := func(i int, src *data.IndexedDataset, samples int) (data.Dataset[data.GPTSample], error) {
		calls = append(calls, [2]int{i, samples})
		return data.NewGPTDataset(context.Background(), src, data.SplitTrain, samples, gc)
	}
	// One epoch: 10 and 30 samples of 32 tokens (each document is 33 tokens, one
	// sample, and the last token starts the next).
	ds, err := Blend([]*data.IndexedDataset{small, large}, nil, 20, build)
	require.NoError(t, err)
	assert.Equal(t, [][2]int{{0, 0}, {1, 0}}, calls, "one epoch of each")
	counts := [2]int{}
	for i := range ds.Len() {
		c, _ := ds.(*data.BlendedDataset[data.GPTSample]).Locate(i)
		counts[c]++
	}
	assert.Equal(t, [2]int{5, 15}, counts, "weights 10 : 30")

	calls = nil
	ds, err = Blend([]*data.IndexedDataset{small, large}, nil, 80, build)
	require.NoError(t, err)
	assert.Equal(t, 80, ds.Len())
	require.Len(t, calls, 4)
	assert.Equal(t, [2]int{0, 0}, calls[0])
	assert.Equal(t, 0, calls[2][0])
	assert.InDelta(t, 20, calls[2][1], 1, "a quarter of 80, with Megatron's 0.5%% margin")
	assert.InDelta(t, 60, calls[3][1], 1)
}

// TestBlendSplit: per-split paths give each split its own sources, used whole.
func TestBlendSplit(t *testing.T) {
	dir := t.TempDir()
	a, v := filepath.Join(dir, "a"), filepath.Join(dir, "v")
	indexed(t, a, 10, 33)
	indexed(t, v, 4, 33)
	c := &settings.Common{CacheDir: dir, TokenizerType: "tiny", MegatronFlags: settings.MegatronFlags{
		TrainDataPath: []string{a}, ValidDataPath: []string{v}}}
	sources, about, _, err := Sources(context.Background(), c, Spec{}, 50, true, io.Discard)
	require.NoError(t, err)
	defer func() {
		for _, s := range sources {
			s.Close()
		}
	}()
	assert.Equal(t, "--train-data-path "+a+", --valid-data-path "+v, about)
	for _, tc := range []struct {
		part   data.Split
		prefix string
		split  string
	}{{data.SplitTrain, a, "1,0,0"}, {data.SplitValid, v, "0,1,0"}} {
		_, err := BlendSplit(c, sources, tc.part, 3, func(src *data.IndexedDataset, split string, samples int) (data.Dataset[data.GPTSample], error) {
			assert.Equal(t, tc.prefix, src.Prefix())
			assert.Equal(t, tc.split, split)
			return data.NewGPTDataset(context.Background(), src, tc.part, samples, data.GPTConfig{SeqLen: 32, Seed: 1, Split: split})
		})
		require.NoError(t, err)
	}
}
