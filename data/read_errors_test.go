package data

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// A .bin truncated after it was opened (lazy reads) makes the loader return an error
// naming the dataset, the sample, the file and the byte offset: no panic, no short
// batch.
func TestLoaderReportsReadErrors(t *testing.T) {
	dir := t.TempDir()
	prefix := filepath.Join(dir, "corpus_text_document")
	writeDocs(t, prefix, staleTestDocs())
	ds, err := OpenIndexed(prefix, ReadLazy)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	cfg := GPTConfig{SeqLen: 16, Seed: 7, Split: "100,0,0", EOD: -1}
	g, err := NewGPTDataset(context.Background(), ds, SplitTrain, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, bin := IndexedPaths(prefix)
	const kept = 400 // bytes: the first 100 tokens
	if err := os.Truncate(bin, kept); err != nil {
		t.Fatal(err)
	}
	l := NewLoader(context.Background(), NewPretrainingSampler(g.Len(), 0, 4, 0, 1).Batches(), CollateGPT(g), LoaderConfig{Workers: 2})
	defer l.Close()
	var last error
	for _, err := range l.All() {
		last = err
	}
	if last == nil {
		t.Fatal("every batch was read from a truncated file")
	}
	re := regexp.MustCompile(`^data: GPT dataset (.+): sample (\d+): sequence (\d+) at token offset (\d+): data: read sequence (\d+) of (.+) at byte (\d+): unexpected EOF$`)
	m := re.FindStringSubmatch(last.Error())
	if m == nil {
		t.Fatalf("error %q does not have the expected form", last)
	}
	abs, _ := filepath.Abs(prefix)
	seq, _ := strconv.Atoi(m[3])
	off, _ := strconv.Atoi(m[4])
	at, _ := strconv.ParseInt(m[7], 10, 64)
	if m[1] != abs || m[5] != m[3] || m[6] != prefix+".bin" {
		t.Errorf("error %q: want dataset %s and file %s.bin", last, abs, prefix)
	}
	if want := ds.SequencePointer(seq) + int64(4*off); at != want || at+int64(4*(ds.SequenceLen(seq)-off)) <= kept {
		t.Errorf("error %q: byte %d, want %d, past the %d bytes kept", last, at, want, kept)
	}
}

// A panic in a collate function fails its batch, not the process.
func TestLoaderRecoversPanics(t *testing.T) {
	collate := func(_ context.Context, idx []int) (int, error) {
		if idx[0] == 1 {
			panic("bad sample")
		}
		return idx[0], nil
	}
	l := NewLoader(context.Background(), NewPretrainingSampler(4, 0, 1, 0, 1).Batches(), collate, LoaderConfig{Workers: 1})
	defer l.Close()
	if b, err := l.Next(); b != 0 || err != nil {
		t.Fatalf("batch 0: %v, %v", b, err)
	}
	_, err := l.Next()
	if want := "data: loader: assembling the micro-batch of samples [1]: panic: bad sample"; err == nil || err.Error() != want {
		t.Fatalf("batch 1: %v, want %q", err, want)
	}
	if b, err := l.Next(); b != 2 || err != nil {
		t.Fatalf("batch 2 after the failed one: %v, %v", b, err)
	}
}

// A sample whose tokens no longer fit its indices (the source changed under the
// dataset) is an error naming the dataset, the sample and the offset, never a panic or
// a short slice.
func TestGPTSampleThatDoesNotFit(t *testing.T) {
	src := &MemorySource{Seqs: [][]int32{{1, 2, 3, 4, 5}, {6, 7, 8, 9, 10, 11}, {12, 13, 14}}}
	cfg := GPTConfig{SeqLen: 4, Seed: 3, Split: "100,0,0", EOD: -1, Name: "memory:changing"}
	g, err := NewGPTDataset(context.Background(), src, SplitTrain, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	src.Seqs[1] = src.Seqs[1][:2] // the source changes after the indices were built
	var errs []string
	for i := range g.Len() {
		s, err := g.ReadSample(i)
		if err != nil {
			errs = append(errs, err.Error())
		} else if len(s.Tokens) != cfg.SeqLen {
			t.Errorf("sample %d has %d tokens", i, len(s.Tokens))
		}
	}
	if len(errs) == 0 {
		t.Fatal("no sample noticed the change")
	}
	re := regexp.MustCompile(`^data: GPT dataset memory:changing: sample \d+ (reads tokens \[\d+, \d+\) of sequence 1, which has 2|\(sequence \d offset \d to sequence \d offset \d\) holds \d+ tokens, not SeqLen\+1 = 5): the source changed since its indices were built$`)
	for _, e := range errs {
		if !re.MatchString(e) {
			t.Errorf("error %q does not have the expected form", e)
		}
	}
	func() {
		defer func() {
			if p := recover(); p == nil || !strings.HasPrefix(fmt.Sprint(p), "data: GPT dataset memory:changing: sample ") {
				t.Errorf("Sample of a sample that does not fit: panic %v", p)
			}
		}()
		for i := range g.Len() {
			g.Sample(i)
		}
	}()
}

// Cached indices that do not fit the source are refused when loaded, naming the sample.
func TestGPTIndexCacheRefusesIndicesThatDoNotFit(t *testing.T) {
	dir := t.TempDir()
	cfg := gptCacheConfig(dir, true)
	first, err := NewGPTDataset(context.Background(), cacheTestSource(), SplitTrain, 50, cfg)
	if err != nil {
		t.Fatal(err)
	}
	arrays, err := readIndexFile(first.Info().CachePath)
	if err != nil {
		t.Fatal(err)
	}
	arrays[1][5] += 1 // sample row 2's offset: samples 1 and 2 no longer span SeqLen tokens
	var b strings.Builder
	if err := encodeIndex(&b, arrays); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(first.Info().CachePath, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = NewGPTDataset(context.Background(), cacheTestSource(), SplitTrain, 50, cfg)
	want := "data: GPT train indices from " + first.Info().CachePath + ": sample 1 spans 9 tokens, not SeqLen = 8: the indices do not match the source"
	if err == nil || err.Error() != want {
		t.Fatalf("loading indices that do not fit: %v\nwant %s", err, want)
	}
}

// failingSource is a source whose sequence bad cannot be read (an injected disk error).
type failingSource struct {
	*MemorySource
	bad int
}

func (f failingSource) ReadTokens(dst []int32, i, offset, n int) ([]int32, error) {
	if i == f.bad {
		return dst, fmt.Errorf("data: read sequence %d of test.bin at byte %d: injected", i, 4*offset)
	}
	return f.MemorySource.ReadTokens(dst, i, offset, n)
}

// BERT and T5 samples and their collate functions return read errors naming the
// sentence, the file and the offset.
func TestSentenceDatasetsReportReadErrors(t *testing.T) {
	ctx := context.Background()
	src := failingSource{sentenceSource(5, 40, 6), 17}
	bert, err := NewBERTDataset(ctx, src, SplitTrain, 0, testBERTConfig())
	if err != nil {
		t.Fatal(err)
	}
	t5, err := NewT5Dataset(ctx, src, SplitTrain, 0, testT5Config())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		n       int
		collate func(ctx context.Context, idx []int) error
		re      string
	}{
		{"bert", bert.Len(), func(ctx context.Context, idx []int) error { _, err := CollateSamples(bert)(ctx, idx); return err },
			`^data: BERT sample \d+: sentence 17: data: read sequence 17 of test.bin at byte 0: injected$`},
		{"t5", t5.Len(), func(ctx context.Context, idx []int) error { _, err := CollateSamples(t5)(ctx, idx); return err },
			`^data: T5 sample \d+: sentence 17: data: read sequence 17 of test.bin at byte 0: injected$`},
	} {
		failed := 0
		for i := range tc.n {
			if err := tc.collate(ctx, []int{i}); err != nil {
				failed++
				if !regexp.MustCompile(tc.re).MatchString(err.Error()) {
					t.Errorf("%s sample %d: %q does not match %s", tc.name, i, err, tc.re)
				}
			}
		}
		if failed == 0 {
			t.Errorf("%s: no sample read sentence 17", tc.name)
		}
	}
}
