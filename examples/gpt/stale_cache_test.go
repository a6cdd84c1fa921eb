package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/data"
)

// writeDocuments writes an indexed dataset of one sequence per document, document j
// holding the tokens of docs[j].
func writeDocuments(t *testing.T, prefix string, docs [][]int32) {
	t.Helper()
	b, err := data.NewIndexedBuilder(prefix, data.Int32)
	require.NoError(t, err)
	for _, d := range docs {
		require.NoError(t, b.AddDocument(d, []int{len(d)}))
	}
	require.NoError(t, b.Finalize())
}

// TestStaleIndexCache: a dataset regenerated under the same prefix with two documents
// of different length swapped, its .idx and .bin given back their old sizes (the swap
// keeps them) and modification times, trains with the cache of the old one exactly as
// with a fresh cache: the index cache is keyed by the .idx contents.
func TestStaleIndexCache(t *testing.T) {
	dir := t.TempDir()
	prefix := filepath.Join(dir, "corpus")
	// 400 tokens: 12 samples of 32+1 in one epoch. With the indices of the old lengths
	// (a cache keyed by name and counts), iteration 2 reads past the end of a document
	// and panics, the failure.
	lengths := []int{36, 44, 160, 160}
	docs := make([][]int32, len(lengths))
	for j, n := range lengths {
		docs[j] = make([]int32, n)
		for k := range docs[j] {
			docs[j][k] = int32((j*37 + k*k*13 + k) % 251)
		}
	}
	writeDocuments(t, prefix, docs)
	files := []string{prefix + ".idx", prefix + ".bin"}
	old := make([]os.FileInfo, len(files))
	for i, f := range files {
		var err error
		old[i], err = os.Stat(f)
		require.NoError(t, err)
	}
	args := func(cache string) []string {
		return tinyArgs(t, "--data-path", prefix, "--cache-dir", cache, "--split", "1,0,0",
			"--train-iters", "2", "--eval-iters", "0", "--gen-tokens", "0")
	}
	stale := t.TempDir()
	before, _ := runTiny(t, args(stale))

	docs[0], docs[1] = docs[1], docs[0]
	writeDocuments(t, prefix, docs)
	for i, f := range files {
		st, err := os.Stat(f)
		require.NoError(t, err)
		require.Equal(t, old[i].Size(), st.Size(), "%s keeps its size", f)
		require.NoError(t, os.Chtimes(f, time.Now(), old[i].ModTime()))
	}

	got, _ := runTiny(t, args(stale))
	want, _ := runTiny(t, args(t.TempDir()))
	require.Len(t, want.Losses, 2)
	assert.Equal(t, want.Losses, got.Losses, "the old cache trains as a fresh one on the new data")
	assert.NotEqual(t, before.Losses[0], want.Losses[0], "the swap changes the first batch")
}
