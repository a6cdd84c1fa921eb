package data

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// writeDocs writes docs, one sequence each, as the indexed dataset prefix.
func writeDocs(t *testing.T, prefix string, docs [][]int32) {
	t.Helper()
	b, err := NewIndexedBuilder(prefix, Int32)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		if err := b.AddDocument(d, []int{len(d)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Finalize(); err != nil {
		t.Fatal(err)
	}
}

// staleTestDocs returns 40 documents of lengths 3 to 25, token o of document d being
// 1000·d + o.
func staleTestDocs() [][]int32 {
	docs := make([][]int32, 40)
	for d := range docs {
		docs[d] = make([]int32, 3+(d*7)%23)
		for o := range docs[d] {
			docs[d][o] = int32(1000*d + o)
		}
	}
	return docs
}

// openGPT opens prefix and builds its training GPT dataset with cache (dir "" for none).
func openGPT(t *testing.T, prefix, cache string) *GPTDataset {
	t.Helper()
	ds, err := OpenIndexed(prefix, ReadCached)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ds.Close() })
	cfg := GPTConfig{SeqLen: 16, Seed: 7, Split: "100,0,0", EOD: -1, Cache: IndexCache{Dir: cache, Builder: true}}
	g, err := NewGPTDataset(context.Background(), ds, SplitTrain, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// A dataset regenerated under the same prefix with the same document count, token
// count, file sizes and modification times but other document lengths gets new
// indices, not the cached ones of the old dataset.
func TestGPTIndexCacheSeesRegeneratedDataset(t *testing.T) {
	dir := t.TempDir()
	prefix, cache := filepath.Join(dir, "corpus_text_document"), filepath.Join(dir, "cache")
	docs := staleTestDocs()
	writeDocs(t, prefix, docs)
	old := openGPT(t, prefix, cache)
	if old.Info().Loaded {
		t.Fatal("the first build loaded indices")
	}

	idx, bin := IndexedPaths(prefix)
	var stats [2]os.FileInfo
	for i, p := range []string{idx, bin} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		stats[i] = st
	}
	docs[20], docs[30] = docs[30], docs[20] // lengths 5 and 6: same count, tokens and sizes
	writeDocs(t, prefix, docs)
	for i, p := range []string{idx, bin} {
		if err := os.Chtimes(p, time.Time{}, stats[i].ModTime()); err != nil {
			t.Fatal(err)
		}
		if st, _ := os.Stat(p); st.Size() != stats[i].Size() {
			t.Fatalf("%s changed size: the test needs the same sizes", p)
		}
	}

	got, want := openGPT(t, prefix, cache), openGPT(t, prefix, "")
	if got.Info().Loaded {
		t.Error("the regenerated dataset loaded the old dataset's cached indices")
	}
	if got.Len() != want.Len() {
		t.Fatalf("%d samples, want %d", got.Len(), want.Len())
	}
	for i := range want.Len() {
		g, w := got.Sample(i), want.Sample(i)
		if !slices.Equal(g.Tokens, w.Tokens) || !slices.Equal(g.Labels, w.Labels) {
			t.Fatalf("sample %d:\n got %v\nwant %v", i, g.Tokens, w.Tokens)
		}
	}
}
