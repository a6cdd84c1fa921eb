package data

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestGPTSampleMasksAndPositions(t *testing.T) {
	const eod = 9
	// One document, s = 4: ⌊(9−1)/4⌋ = 2 samples, [1 9 2 3 4] and [4 5 6 9 7].
	src := &MemorySource{Seqs: [][]int32{{1, eod, 2, 3, 4, 5, 6, eod, 7}}}
	want := map[int32]GPTSample{
		1: {Tokens: []int32{1, eod, 2, 3}, Labels: []int32{eod, 2, 3, 4}, LossMask: []float32{1, 0, 1, 1}, PositionIDs: []int32{0, 1, 0, 1}, Segments: []int32{0, 0, 1, 1}},
		4: {Tokens: []int32{4, 5, 6, eod}, Labels: []int32{5, 6, eod, 7}, LossMask: []float32{1, 1, 1, 0}, PositionIDs: []int32{0, 1, 2, 3}, Segments: []int32{0, 0, 0, 0}},
	}
	plain := map[int32]GPTSample{
		1: {LossMask: []float32{1, 1, 1, 1}, PositionIDs: []int32{0, 1, 2, 3}},
		4: {LossMask: []float32{1, 1, 1, 1}, PositionIDs: []int32{0, 1, 2, 3}},
	}
	for _, withEOD := range []bool{true, false} {
		cfg := GPTConfig{SeqLen: 4, Split: "1", EOD: eod, EODMaskLoss: withEOD, ResetPositionIDs: withEOD, ResetAttentionMask: withEOD}
		ds, err := NewGPTDataset(context.Background(), src, SplitTrain, 0, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if ds.Len() != 2 {
			t.Fatalf("Len = %d, want 2", ds.Len())
		}
		for i := range ds.Len() {
			got := ds.Sample(i)
			w := want[got.Tokens[0]]
			if !slices.Equal(got.Tokens, w.Tokens) || !slices.Equal(got.Labels, w.Labels) {
				t.Fatalf("sample %d = %v → %v, want %v → %v", i, got.Tokens, got.Labels, w.Tokens, w.Labels)
			}
			if !withEOD {
				w = plain[got.Tokens[0]]
			}
			if !slices.Equal(got.LossMask, w.LossMask) || !slices.Equal(got.PositionIDs, w.PositionIDs) || !slices.Equal(got.Segments, w.Segments) {
				t.Errorf("EOD options %v, sample %v: loss mask %v, positions %v, segments %v; want %v, %v, %v",
					withEOD, got.Tokens, got.LossMask, got.PositionIDs, got.Segments, w.LossMask, w.PositionIDs, w.Segments)
			}
		}
	}
}

func TestGPTSplitsAreDisjoint(t *testing.T) {
	src := &MemorySource{}
	for q := range 100 {
		src.Seqs = append(src.Seqs, []int32{int32(q), int32(q), int32(q)})
	}
	seen := map[int32]Split{}
	for _, part := range []Split{SplitTrain, SplitValid, SplitTest} {
		ds, err := NewGPTDataset(context.Background(), src, part, 0, GPTConfig{SeqLen: 2, Split: "8,1,1", EOD: -1})
		if err != nil {
			t.Fatal(err)
		}
		if in := ds.Info(); in.Last-in.First != map[Split]int{SplitTrain: 80, SplitValid: 10, SplitTest: 10}[part] {
			t.Fatalf("%v split holds documents [%d, %d)", part, in.First, in.Last)
		}
		for i := range ds.Len() {
			for _, tok := range ds.Sample(i).Tokens {
				if p, ok := seen[tok]; ok && p != part {
					t.Fatalf("document %d is in the %v and %v splits", tok, p, part)
				}
				seen[tok] = part
			}
		}
	}
}

func gptCacheConfig(dir string, builder bool) GPTConfig {
	return GPTConfig{SeqLen: 8, Seed: 1234, Split: "969,30,1", EOD: -1, Name: "memory:test",
		Cache: IndexCache{Dir: dir, Builder: builder, Poll: 2 * time.Millisecond}}
}

func cacheTestSource() *MemorySource {
	src := &MemorySource{}
	for q := range 200 {
		seq := make([]int32, 3+q%17)
		for o := range seq {
			seq[o] = int32(q*100 + o)
		}
		src.Seqs = append(src.Seqs, seq)
	}
	return src
}

func sameGPTIndices(t *testing.T, a, b *GPTDataset) {
	t.Helper()
	if !slices.Equal(a.docIndex, b.docIndex) || !slices.Equal(a.sample, b.sample) || !slices.Equal(a.shuffle, b.shuffle) {
		t.Fatal("indices differ")
	}
}

func TestGPTIndexCache(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := cacheTestSource()
	build := func(mod func(*GPTConfig)) *GPTDataset {
		t.Helper()
		cfg := gptCacheConfig(dir, true)
		if mod != nil {
			mod(&cfg)
		}
		ds, err := NewGPTDataset(ctx, src, SplitTrain, 500, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	first := build(nil)
	if in := first.Info(); in.Loaded || in.CachePath == "" {
		t.Fatalf("first build: %+v, want built and cached", in)
	}
	if _, err := os.Stat(first.Info().CachePath); err != nil {
		t.Fatal(err)
	}
	second := build(nil)
	if in := second.Info(); !in.Loaded || in.CachePath != first.Info().CachePath {
		t.Fatalf("second build: %+v, want loaded from %s", in, first.Info().CachePath)
	}
	sameGPTIndices(t, first, second)
	uncached := build(func(c *GPTConfig) { c.Cache.Dir = "" })
	sameGPTIndices(t, first, uncached)

	sameKey := build(func(c *GPTConfig) { c.EOD, c.EODMaskLoss = 0, true })
	if !sameKey.Info().Loaded {
		t.Error("EOD options changed the cache key; they do not change the indices")
	}
	paths := map[string]string{"base": first.Info().CachePath}
	for name, mod := range map[string]func(*GPTConfig){
		"seed":    func(c *GPTConfig) { c.Seed++ },
		"seq len": func(c *GPTConfig) { c.SeqLen++ },
		"split":   func(c *GPTConfig) { c.Split = "90,5,5" },
		"name":    func(c *GPTConfig) { c.Name = "memory:other" },
	} {
		ds := build(mod)
		if ds.Info().Loaded {
			t.Errorf("changing the %s loaded the old indices", name)
		}
		for other, p := range paths {
			if p == ds.Info().CachePath {
				t.Errorf("changing the %s reused the cache file of %s", name, other)
			}
		}
		paths[name] = ds.Info().CachePath
	}
	ds, err := NewGPTDataset(ctx, src, SplitTrain, 501, gptCacheConfig(dir, true))
	if err != nil {
		t.Fatal(err)
	}
	if ds.Info().Loaded {
		t.Error("changing the number of samples loaded the old indices")
	}
	ds, err = NewGPTDataset(ctx, src, SplitValid, 500, gptCacheConfig(dir, true))
	if err != nil {
		t.Fatal(err)
	}
	if ds.Info().Loaded {
		t.Error("the valid split loaded the train split's indices")
	}
}

func TestGPTIndexCacheNeedsName(t *testing.T) {
	cfg := gptCacheConfig(t.TempDir(), true)
	cfg.Name = ""
	if _, err := NewGPTDataset(context.Background(), cacheTestSource(), SplitTrain, 10, cfg); err == nil {
		t.Fatal("caching a nameless MemorySource succeeded")
	}
}

type prefixedSource struct {
	*MemorySource
	prefix string
}

func (p prefixedSource) Prefix() string { return p.prefix }

func TestGPTIndexCacheNamesByPrefix(t *testing.T) {
	dir := t.TempDir()
	build := func(prefix string) GPTIndexInfo {
		t.Helper()
		cfg := gptCacheConfig(dir, true)
		cfg.Name = ""
		ds, err := NewGPTDataset(context.Background(), prefixedSource{cacheTestSource(), prefix}, SplitTrain, 10, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return ds.Info()
	}
	a, b, c := build("/data/web_text_document"), build("/data/web_text_document"), build("/data/books_text_document")
	if a.Loaded || !b.Loaded || c.Loaded || a.CachePath == c.CachePath {
		t.Fatalf("cache by prefix: loaded %v %v %v, paths %s %s", a.Loaded, b.Loaded, c.Loaded, a.CachePath, c.CachePath)
	}
}

func TestGPTIndexCacheCorrupt(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ds, err := NewGPTDataset(ctx, cacheTestSource(), SplitTrain, 50, gptCacheConfig(dir, true))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(ds.Info().CachePath)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(ds.Info().CachePath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = NewGPTDataset(ctx, cacheTestSource(), SplitTrain, 50, gptCacheConfig(dir, false))
	if err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("loading a damaged cache file: %v, want a checksum error", err)
	}
}

// Non-builder ranks started before the builder wait for its file, then load it.
func TestGPTIndexCacheWaitingRanks(t *testing.T) {
	dir := t.TempDir()
	src := cacheTestSource()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	const waiters = 3
	var wg sync.WaitGroup
	got := make([]*GPTDataset, waiters)
	errs := make([]error, waiters)
	for r := range waiters {
		wg.Go(func() { got[r], errs[r] = NewGPTDataset(ctx, src, SplitTrain, 300, gptCacheConfig(dir, false)) })
	}
	time.Sleep(20 * time.Millisecond) // the waiters poll an empty directory meanwhile
	built, err := NewGPTDataset(ctx, src, SplitTrain, 300, gptCacheConfig(dir, true))
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if built.Info().Loaded {
		t.Fatal("the builder found a cache file; the waiters must not write one")
	}
	for r := range waiters {
		if errs[r] != nil {
			t.Fatalf("waiting rank %d: %v", r, errs[r])
		}
		if !got[r].Info().Loaded {
			t.Fatalf("waiting rank %d built its own indices", r)
		}
		sameGPTIndices(t, built, got[r])
	}
}

func TestGPTIndexCacheWaitTimesOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err := NewGPTDataset(ctx, cacheTestSource(), SplitTrain, 10, gptCacheConfig(t.TempDir(), false))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting without a builder: %v, want context.DeadlineExceeded", err)
	}
}

func TestGPTConfigValidate(t *testing.T) {
	for name, cfg := range map[string]GPTConfig{
		"zero seq len":       {SeqLen: 0, EOD: -1},
		"bad split":          {SeqLen: 4, Split: "x", EOD: -1},
		"EOD mask, no EOD":   {SeqLen: 4, EOD: -1, EODMaskLoss: true},
		"reset mask, no EOD": {SeqLen: 4, EOD: -1, ResetAttentionMask: true},
	} {
		if cfg.Validate() == nil {
			t.Errorf("%s: Validate accepted %+v", name, cfg)
		}
	}
	if _, err := NewGPTDataset(context.Background(), &MemorySource{Seqs: [][]int32{{1}}}, SplitTrain, 1, GPTConfig{SeqLen: 4, EOD: -1, Split: "1"}); err == nil {
		t.Error("a split of one token made a dataset")
	}
}
