package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"megago/data"
	"megago/tensor"
	"megago/train"
)

// corpus is what every rank trains on: the tokenizer, the training and validation
// datasets, and what the run says about them. It is the same on every rank (datasets
// are deterministic and safe for concurrent use), so in-process ranks share one.
type corpus struct {
	tok          data.Tokenizer
	tokType      string // --tokenizer-type
	train, valid data.Dataset[data.GPTSample]
	about        string  // one line: where the tokens come from
	counts       []int64 // per token id: occurrences in the training split
	trainTokens  int64
	sources      []*data.IndexedDataset
}

func (c *corpus) Close() {
	for _, s := range c.sources {
		s.Close()
	}
}

// loadCorpus opens --data-path, or the default corpus (building it on first use), and
// builds the training and validation samples of the whole run. builder is true on the
// one rank per host that may write the cache; the others wait for its files. It checks
// that every token id fits the tokenizer's vocabulary.
func loadCorpus(ctx context.Context, c *config, builder bool, log io.Writer) (*corpus, error) {
	tok, err := data.NewTokenizer(data.TokenizerConfig{Type: c.TokenizerType, VocabFile: c.VocabFile, MergeFile: c.MergeFile})
	if err != nil {
		return nil, fmt.Errorf("--tokenizer-type %s: %w", c.TokenizerType, err)
	}
	cache, err := c.cacheDir()
	if err != nil {
		return nil, err
	}
	prefixes, weights, _ := c.blend() // checked with the flags
	corp := &corpus{tok: tok, tokType: c.TokenizerType}
	if len(prefixes) == 0 {
		var prefix string
		if prefix, corp.about, err = goSourceCorpus(ctx, cache, c, tok, builder, log); err != nil {
			return nil, err
		}
		prefixes = []string{prefix}
	} else {
		corp.about = fmt.Sprintf("--data-path %s", strings.Join(c.DataPath, " "))
	}
	if err := corp.open(prefixes); err != nil {
		corp.Close()
		return nil, err
	}
	gc := data.GPTConfig{SeqLen: c.SeqLength, Seed: c.Seed, Split: c.Split, EOD: tok.Special().EOD,
		Cache: data.IndexCache{Dir: filepath.Join(cache, "index"), Builder: builder}}
	nTrain, nValid := c.TrainIters*c.GlobalBatchSize, c.EvalIters*c.GlobalBatchSize
	corp.train, err = corp.split(ctx, data.SplitTrain, nTrain, weights, gc)
	if err == nil && nValid > 0 {
		corp.valid, err = corp.split(ctx, data.SplitValid, nValid, weights, gc)
	}
	if err != nil {
		corp.Close()
		return nil, err
	}
	return corp, nil
}

// open opens each prefix and checks its ids against the vocabulary.
func (corp *corpus) open(prefixes []string) error {
	v := corp.tok.VocabSize()
	for _, p := range prefixes {
		ds, err := data.OpenIndexed(p, data.ReadMmap)
		if err != nil {
			return fmt.Errorf("--data-path: %w", err)
		}
		corp.sources = append(corp.sources, ds)
		if id := maxTokenID(ds); id >= int64(v) {
			return fmt.Errorf("--data-path %s holds token id %d, but the %s tokenizer has %d ids: the dataset was made with another vocabulary (--tokenizer-type, --vocab-file)",
				p, id, corp.tokType, v)
		}
	}
	return nil
}

// split builds the samples of one split: one dataset, or a blend of several.
func (corp *corpus) split(ctx context.Context, part data.Split, n int, w []float64, gc data.GPTConfig) (data.Dataset[data.GPTSample], error) {
	counts := []int{n}
	if len(corp.sources) > 1 {
		if w == nil {
			w = make([]float64, len(corp.sources))
			for i := range w {
				w[i] = 1
			}
		}
		var err error
		if counts, _, err = data.BlendSizes(w, n); err != nil {
			return nil, err
		}
	}
	parts := make([]data.Dataset[data.GPTSample], len(corp.sources))
	for i, src := range corp.sources {
		ds, err := data.NewGPTDataset(ctx, src, part, counts[i], gc)
		if err != nil {
			return nil, fmt.Errorf("%s samples of %s: %w", part, src.Prefix(), err)
		}
		if part == data.SplitTrain {
			info := ds.Info()
			if info.Last == info.First {
				return nil, fmt.Errorf("%s has no training documents with --split %s", src.Prefix(), gc.Split)
			}
			corp.countTokens(src, info.First, info.Last)
		}
		parts[i] = ds
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	return data.NewBlendedDataset(parts, w, n)
}

// countTokens counts the tokens of sequences [first, last) of src for the unigram
// entropy of the training tokens.
func (corp *corpus) countTokens(src data.TokenSource, first, last int) {
	if corp.counts == nil {
		corp.counts = make([]int64, corp.tok.VocabSize())
	}
	var buf []int32
	for i := first; i < last; i++ {
		buf = src.AppendTokens(buf[:0], i, 0, src.SequenceLen(i))
		for _, id := range buf {
			corp.counts[id]++
		}
		corp.trainTokens += int64(len(buf))
	}
}

// entropy returns the unigram entropy of the training tokens in nats: the loss of the
// best model that ignores context, which the trained model must beat.
func (corp *corpus) entropy() float64 {
	h := 0.0
	for _, k := range corp.counts {
		if k > 0 {
			p := float64(k) / float64(corp.trainTokens)
			h -= p * math.Log(p)
		}
	}
	return h
}

// maxTokenID returns the largest token id in ds (-1 if it is empty).
func maxTokenID(ds *data.IndexedDataset) int64 {
	m := int64(-1)
	var buf []int32
	for i := range ds.NumSequences() {
		buf = ds.AppendTokens(buf[:0], i, 0, ds.SequenceLen(i))
		for _, id := range buf {
			m = max(m, int64(id))
		}
	}
	return m
}

// The default corpus: a fixed quarter of the non-test, hand-written .go files of the
// local Go installation's standard library (GOROOT/src without cmd, vendor and testdata
// trees), one document per file, in a fixed pseudo-random order. It is tokenized once
// and cached under CACHE/gosrc-VERSION-HASH, where HASH covers the Go version, the
// tokenizer and every selected file's path and contents, so a different installation or
// tokenizer gets a corpus of its own.
const (
	corpusSample  = 4       // keep the files whose path hashes to 0 mod corpusSample
	corpusMaxFile = 100_000 // bytes; larger files are mostly tables
)

// goSourceCorpus returns the prefix of the default corpus's indexed dataset, building it
// if needed, and a line describing it.
func goSourceCorpus(ctx context.Context, cache string, c *config, tok data.Tokenizer, builder bool, log io.Writer) (prefix, about string, err error) {
	root, version, err := goInstallation()
	if err != nil {
		return "", "", err
	}
	files, key, size, err := goSourceFiles(root, version, c)
	if err != nil {
		return "", "", err
	}
	dir := filepath.Join(cache, "gosrc-"+version+"-"+key)
	prefix = filepath.Join(dir, "gosrc_text_document")
	about = fmt.Sprintf("%d .go files of %s's standard library (%s, %.1f MB), one document each, cached in %s",
		len(files), version, filepath.Join(root, "src"), float64(size)/1e6, dir)
	idx, _ := data.IndexedPaths(prefix)
	if _, err := os.Stat(idx); err == nil {
		return prefix, about, nil
	}
	if !builder {
		return prefix, about, waitForFile(ctx, idx)
	}
	fmt.Fprintf(log, "preparing the default corpus (first run only): %s\n", about)
	start := time.Now()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	jsonl := filepath.Join(dir, "corpus.jsonl")
	if err := writeJSONL(jsonl, root, files); err != nil {
		return "", "", err
	}
	sum, err := data.Preprocess(ctx, data.PreprocessConfig{Input: jsonl, OutputPrefix: filepath.Join(dir, "gosrc"),
		JSONKeys: []string{"text"}, AppendEOD: true, Strict: true}, tok)
	if err != nil {
		return "", "", fmt.Errorf("tokenizing the default corpus: %w", err)
	}
	fmt.Fprintf(log, "tokenized %d documents into %d tokens in %.1fs (the same as: megago preprocess -input %s -output-prefix %s -tokenizer-type %s -append-eod)\n",
		sum.Documents, sum.Outputs[0].Tokens, time.Since(start).Seconds(), jsonl, filepath.Join(dir, "gosrc"), c.TokenizerType)
	return prefix, about, nil
}

// goInstallation returns the local Go installation's root and version: `go env GOROOT`
// (the go command that builds megago), else the root this program was built with.
func goInstallation() (root, version string, err error) {
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
		root = strings.TrimSpace(string(out))
	}
	if root == "" {
		root = runtime.GOROOT() //nolint:staticcheck // the fallback when no go command is on PATH
	}
	if root == "" {
		return "", "", errors.New("the default corpus needs a Go installation (no go command on PATH and no GOROOT); give --data-path")
	}
	version = runtime.Version()
	if b, err := os.ReadFile(filepath.Join(root, "VERSION")); err == nil {
		version = strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
	}
	return root, version, nil
}

// goSourceFiles lists the default corpus's files (relative to root/src, in a fixed
// shuffled order) and returns them with the cache key and their total size.
func goSourceFiles(root, version string, c *config) (files []string, key string, size int64, err error) {
	src := filepath.Join(root, "src")
	h := sha256.New()
	fmt.Fprintf(h, "megago gosrc v2\n%s\n%s %s %s\n", version, c.TokenizerType, c.VocabFile, c.MergeFile)
	err = filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			if n := d.Name(); rel == "cmd" || n == "vendor" || n == "testdata" || n[0] == '.' || n[0] == '_' {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") || !sampled(rel) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil || len(b) > corpusMaxFile || generated(b) {
			return err
		}
		files = append(files, rel)
		size += int64(len(b))
		fmt.Fprintf(h, "%s %d\n", filepath.ToSlash(rel), len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return nil, "", 0, fmt.Errorf("reading the Go sources for the default corpus: %w", err)
	}
	if len(files) == 0 {
		return nil, "", 0, fmt.Errorf("no Go sources under %s for the default corpus; give --data-path", src)
	}
	// Megatron's --split takes contiguous runs of documents; in path order the validation
	// split would be a few packages (syscall tables, time, unicode), so shuffle the files.
	sort.Slice(files, func(i, j int) bool { return pathHash(files[i], "order") < pathHash(files[j], "order") })
	return files, hex.EncodeToString(h.Sum(nil))[:12], size, nil
}

// sampled reports whether the file at rel belongs to the default corpus.
func sampled(rel string) bool { return pathHash(rel, "sample")%corpusSample == 0 }

// pathHash is a hash of a file's path (with /) and a purpose.
func pathHash(rel, purpose string) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s:%s", purpose, filepath.ToSlash(rel))
	return h.Sum64()
}

// generated reports whether a Go file says it was generated (tables, syscall numbers).
func generated(b []byte) bool {
	head := string(b[:min(len(b), 2048)])
	return strings.Contains(head, "// Code generated") && strings.Contains(head, "DO NOT EDIT")
}

// writeJSONL writes one {"text": ...} line per file, under a temporary name renamed into
// place, the input format of megago preprocess.
func writeJSONL(path, root string, files []string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".corpus-*.jsonl")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriter(tmp)
	enc := json.NewEncoder(w)
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, "src", f))
		if err != nil {
			tmp.Close()
			return err
		}
		if err := enc.Encode(struct {
			Text string `json:"text"`
			Path string `json:"path"`
		}{string(b), filepath.ToSlash(f)}); err != nil {
			tmp.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// waitForFile polls for path until it exists or ctx ends.
func waitForFile(ctx context.Context, path string) error {
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s (built by local rank 0): %w", path, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// gptBatch holds one iteration's micro-batches of this DP rank.
type gptBatches []data.GPTBatch

// nextBatches takes the next m micro-batches from the loader.
func nextBatches(l *data.Loader[data.GPTBatch], m int) (gptBatches, error) {
	bs := make(gptBatches, m)
	for i := range bs {
		var err error
		if bs[i], err = l.Next(); err != nil {
			return nil, fmt.Errorf("reading micro-batch %d: %w", i, err)
		}
	}
	return bs, nil
}

// labels returns micro-batch i's targets with -100 (ignored) where the loss mask is 0.
func (bs gptBatches) labels(i int) []int32 {
	b := bs[i]
	out := make([]int32, len(b.Labels))
	for j, l := range b.Labels {
		out[j] = l
		if b.LossMask[j] == 0 {
			out[j] = -100
		}
	}
	return out
}

// tensors returns the micro-batches as the trainer reads them: token ids and labels
// [B, T], I32.
func (bs gptBatches) tensors(dev *tensor.Device) train.GPTBatch {
	return func(i int) (ids, labels *tensor.Tensor) {
		b := bs[i]
		return tensor.FromSlice(dev, b.Tokens, b.B, b.T), tensor.FromSlice(dev, bs.labels(i), b.B, b.T)
	}
}
