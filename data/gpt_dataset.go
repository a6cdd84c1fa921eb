package data

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// GPTConfig configures a GPTDataset. The zero value of each field is its default where
// the comment gives one.
type GPTConfig struct {
	// SeqLen is s, the number of input tokens of a sample (each sample reads s+1 tokens).
	SeqLen int
	// Seed seeds the document and shuffle indices (Megatron's --seed, default 1234).
	Seed uint64
	// Split is Megatron's --split, e.g. "969,30,1"; "" means DefaultSplit.
	Split string
	// EOD is the end-of-document token, used by EODMaskLoss, ResetPositionIDs and
	// ResetAttentionMask; -1 if there is none.
	EOD int32
	// EODMaskLoss zeroes the loss mask where the input token is EOD (Megatron's
	// --eod-mask-loss): the model is not trained to predict across documents.
	EODMaskLoss bool
	// ResetPositionIDs restarts position ids at 0 after every EOD input token (Megatron's
	// --reset-position-ids).
	ResetPositionIDs bool
	// ResetAttentionMask gives each sample the document of each input token
	// (GPTSample.Segments), so that attention does not cross an EOD input token
	// (Megatron's --reset-attention-mask, whose mask hides positions ≤ i from positions
	// > i after an EOD at i).
	ResetAttentionMask bool
	// Name identifies the source in the cache key: a path or any caller-given name, the
	// same on every rank. If it is empty and the source has a method Prefix() string
	// (IndexedDataset), the prefix made absolute is used. Required when Cache.Dir is set
	// and the source has no prefix.
	Name string
	// Cache says where the indices are cached and which rank builds them.
	Cache IndexCache
}

// Validate reports the first invalid field.
func (c GPTConfig) Validate() error {
	if c.SeqLen <= 0 {
		return fmt.Errorf("data: GPTConfig.SeqLen = %d, want > 0", c.SeqLen)
	}
	if _, err := ParseSplit(c.Split); err != nil {
		return err
	}
	if (c.EODMaskLoss || c.ResetPositionIDs || c.ResetAttentionMask) && c.EOD < 0 {
		return fmt.Errorf("data: GPTConfig: EODMaskLoss, ResetPositionIDs or ResetAttentionMask needs an EOD id, got %d", c.EOD)
	}
	return nil
}

// GPTDataset serves Megatron's GPT samples from one split of a TokenSource. Each sequence
// of the source is a document. It is safe for concurrent use.
type GPTDataset struct {
	src      TokenSource
	cfg      GPTConfig
	name     string  // the source in errors: cfg.Name, its prefix, or its type
	docIndex []int64 // [E·D] sequence ids, the reading order
	sample   []int64 // [2(N+1)] (position in docIndex, offset) rows
	shuffle  []int64 // [N] sample order
	info     GPTIndexInfo
}

// GPTIndexInfo describes how a GPTDataset's indices were made.
type GPTIndexInfo struct {
	Split          Split  // which part of the source
	First, Last    int    // the split's documents (sequences) [First, Last)
	TokensPerEpoch int    // tokens in those documents
	Epochs         int    // E, the passes over the documents
	SeparateLast   bool   // the last epoch was shuffled apart from the others
	CachePath      string // the cache file, "" without a cache
	Loaded         bool   // indices were read from CachePath rather than built here
}

// GPTSample is one sample; all slices have length SeqLen (T).
type GPTSample struct {
	Tokens      []int32   // [T] inputs, sample[:-1]
	Labels      []int32   // [T] targets, sample[1:]
	LossMask    []float32 // [T] 1, or 0 where the input is EOD with EODMaskLoss
	PositionIDs []int32   // [T] 0..T−1, restarted after EOD with ResetPositionIDs
	// Segments [T] number the documents of the sample's inputs with ResetAttentionMask:
	// 0 at the start, one more after each EOD input (which ends its document). Nil
	// without ResetAttentionMask.
	Segments []int32
}

// NewGPTDataset builds (or loads from cfg.Cache) the indices of split part of src for at
// least numSamples samples; numSamples ≤ 0 means one epoch. A non-builder rank waits
// for the cache file until ctx ends. Errors name what was being built or read.
func NewGPTDataset(ctx context.Context, src TokenSource, part Split, numSamples int, cfg GPTConfig) (*GPTDataset, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lo, hi, w, err := splitRange(cfg.Split, part, src.NumSequences())
	if err != nil {
		return nil, err
	}
	tokens := 0
	for i := lo; i < hi; i++ {
		tokens += src.SequenceLen(i)
	}
	if tokens <= 1 {
		return nil, fmt.Errorf("data: GPT %v split of %d sequences: documents [%d, %d) hold %d tokens, need ≥ 2", part, src.NumSequences(), lo, hi, tokens)
	}
	epochs, separate := gptEpochs(tokens, cfg.SeqLen, numSamples)
	d := &GPTDataset{src: src, cfg: cfg, info: GPTIndexInfo{
		Split: part, First: lo, Last: hi, TokensPerEpoch: tokens, Epochs: epochs, SeparateLast: separate,
	}}
	name, nameErr := sourceName(src, cfg.Name)
	d.name = name
	if nameErr != nil {
		d.name = fmt.Sprintf("%T", src)
	}
	var desc string
	if cfg.Cache.Dir != "" {
		if nameErr != nil {
			return nil, nameErr
		}
		desc = gptDescription(name, src, w, d.info, cfg, numSamples)
	}
	arrays, path, loaded, err := cfg.Cache.loadOrBuild(ctx, "gpt", desc, func() ([][]int64, error) {
		return d.buildIndices(numSamples), nil
	})
	if err != nil {
		return nil, fmt.Errorf("data: GPT %v indices: %w", part, err)
	}
	if err := d.setIndices(arrays); err != nil {
		return nil, fmt.Errorf("data: GPT %v indices from %s: %w", part, path, err)
	}
	d.info.CachePath, d.info.Loaded = path, loaded
	return d, nil
}

// buildIndices makes the document, sample and shuffle indices.
func (d *GPTDataset) buildIndices(numSamples int) [][]int64 {
	in := d.info
	r := newRNG(d.cfg.Seed, "gpt", 0)
	doc := buildDocumentIndex(in.First, in.Last, in.Epochs, in.SeparateLast, r)
	size := func(s int64) int { return d.src.SequenceLen(int(s)) }
	sample := buildSampleIndex(size, doc, d.cfg.SeqLen)
	total := len(sample)/2 - 1
	first := total
	if in.SeparateLast {
		first = ((in.Epochs-1)*in.TokensPerEpoch - 1) / d.cfg.SeqLen
	}
	return [][]int64{doc, sample, buildShuffleIndex(first, total, r)}
}

// setIndices installs arrays after checking that they fit the dataset.
func (d *GPTDataset) setIndices(a [][]int64) error {
	if len(a) != 3 {
		return fmt.Errorf("want 3 arrays, got %d", len(a))
	}
	doc, sample, shuffle := a[0], a[1], a[2]
	n := len(shuffle)
	if len(doc) != d.info.Epochs*(d.info.Last-d.info.First) || len(sample) != 2*(n+1) {
		return fmt.Errorf("array lengths %d, %d, %d do not match the configuration", len(doc), len(sample), n)
	}
	for _, s := range doc {
		if s < int64(d.info.First) || s >= int64(d.info.Last) {
			return fmt.Errorf("document %d outside [%d, %d)", s, d.info.First, d.info.Last)
		}
	}
	for _, j := range shuffle {
		if j < 0 || j >= int64(n) {
			return fmt.Errorf("shuffle entry %d out of [0, %d)", j, n)
		}
	}
	size := func(s int64) int { return d.src.SequenceLen(int(s)) }
	if err := checkSampleRows(doc, sample, size, d.cfg.SeqLen); err != nil {
		return err
	}
	d.docIndex, d.sample, d.shuffle = doc, sample, shuffle
	return nil
}

// sourceName returns name, or the absolute path of src's Prefix() (an IndexedDataset's
// path prefix) when name is empty.
func sourceName(src TokenSource, name string) (string, error) {
	if name != "" {
		return name, nil
	}
	if p, ok := src.(interface{ Prefix() string }); ok && p.Prefix() != "" {
		if abs, err := filepath.Abs(p.Prefix()); err == nil {
			return abs, nil
		}
		return p.Prefix(), nil
	}
	return "", fmt.Errorf("data: caching indices needs a Name for the source (%T has no Prefix)", src)
}

// gptDescription is the text whose hash keys the GPT cache: everything the indices
// depend on — the source's name and a digest of its sequence lengths (sourceDigest), so
// a dataset regenerated under the same name gets new indices — and nothing else (EOD
// options only change how samples are read).
func gptDescription(name string, src TokenSource, w [3]float64, in GPTIndexInfo, cfg GPTConfig, numSamples int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "megago GPT indices v2\nname: %s\nsequences: %d\ndocuments: %d\n", name, src.NumSequences(), src.NumDocuments())
	fmt.Fprintf(&b, "content: %s\n", sourceDigest(src))
	fmt.Fprintf(&b, "split: %s,%s,%s\n", fmtFloat(w[0]), fmtFloat(w[1]), fmtFloat(w[2]))
	fmt.Fprintf(&b, "part: %v [%d, %d) %d tokens\nseed: %d\nsequence length: %d\nsamples: %d\n",
		in.Split, in.First, in.Last, in.TokensPerEpoch, cfg.Seed, cfg.SeqLen, numSamples)
	return b.String()
}

func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// Len returns the number of samples N = ⌊(E·TokensPerEpoch − 1)/SeqLen⌋, at least the
// number asked for.
func (d *GPTDataset) Len() int { return len(d.shuffle) }

// Info describes the indices.
func (d *GPTDataset) Info() GPTIndexInfo { return d.info }
