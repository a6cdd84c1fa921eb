package data

import (
	"context"
	"fmt"
)

// BERTConfig configures a BERTDataset. The zero value of each field is its default where
// the comment gives one.
type BERTConfig struct {
	// SeqLen is T, the sample length including [CLS] and both [SEP]s.
	SeqLen int
	// Seed seeds the sample mapping and, with the sample index, each sample's masking.
	Seed uint64
	// Split is Megatron's --split over documents; "" means DefaultSplit.
	Split string
	// MaskProb is the fraction of tokens masked; zero means 0.15.
	MaskProb float64
	// MaxNgram is the longest masked span in whole words; zero means 3.
	MaxNgram int
	// ShortSeqProb is the probability that a sample targets a random shorter length
	// (Megatron's default is 0.1; zero means never).
	ShortSeqProb float64
	// IsContinuation reports whether a token continues the word before it (WordPiece
	// "##" pieces), for whole-word masking; nil makes every token a word.
	IsContinuation func(id int32) bool
	// Special gives [CLS], [SEP], [MASK] and the padding id; all are required.
	Special SpecialIDs
	// VocabSize bounds the random replacement tokens, drawn uniformly from [0, VocabSize).
	VocabSize int
	// Name identifies the source in the cache key (see GPTConfig.Name).
	Name string
	// Cache says where the sample mapping is cached and which rank builds it.
	Cache IndexCache
}

func (c BERTConfig) withDefaults() BERTConfig {
	if c.MaskProb == 0 {
		c.MaskProb = 0.15
	}
	if c.MaxNgram == 0 {
		c.MaxNgram = 3
	}
	return c
}

// Validate reports the first invalid field.
func (c BERTConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.SeqLen < 5:
		return fmt.Errorf("data: BERTConfig.SeqLen = %d, want ≥ 5", c.SeqLen)
	case !(c.MaskProb > 0 && c.MaskProb <= 1):
		return fmt.Errorf("data: BERTConfig.MaskProb = %v, want in (0, 1]", c.MaskProb)
	case c.MaxNgram < 1:
		return fmt.Errorf("data: BERTConfig.MaxNgram = %d, want ≥ 1", c.MaxNgram)
	case !(c.ShortSeqProb >= 0 && c.ShortSeqProb <= 1):
		return fmt.Errorf("data: BERTConfig.ShortSeqProb = %v, want in [0, 1]", c.ShortSeqProb)
	case c.Special.CLS < 0 || c.Special.SEP < 0 || c.Special.Mask < 0 || c.Special.Pad < 0:
		return fmt.Errorf("data: BERTConfig.Special needs CLS, SEP, Mask and Pad, got %d, %d, %d, %d",
			c.Special.CLS, c.Special.SEP, c.Special.Mask, c.Special.Pad)
	case c.VocabSize < 1:
		return fmt.Errorf("data: BERTConfig.VocabSize = %d, want ≥ 1", c.VocabSize)
	}
	_, err := ParseSplit(c.Split)
	return err
}

// BERTDataset serves BERT samples: sentence pairs for masked language modelling with a
// sentence-order target. Each sequence of the source is a sentence. It is safe for
// concurrent use.
type BERTDataset struct {
	src  TokenSource
	cfg  BERTConfig
	rows []int64 // [3N] (first sentence, end sentence, target tokens)
}

// BERTSample is one sample; all slices have length SeqLen (T). Attention is
// bidirectional over the tokens where PaddingMask is 1.
type BERTSample struct {
	Tokens      []int32   // [T] [CLS] A [SEP] B [SEP], masked, then padding
	TokenTypes  []int32   // [T] 0 for [CLS] A [SEP] and padding, 1 for B [SEP]
	Labels      []int32   // [T] the original token where masked, −1 elsewhere
	LossMask    []float32 // [T] 1 where masked
	PaddingMask []int32   // [T] 1 on real tokens, 0 on padding
	IsRandom    int32     // 1 when A and B were swapped (the sentence-order target)
}

// NewBERTDataset builds (or loads from cfg.Cache) the sample mapping of split part of
// src for at least numSamples samples; numSamples ≤ 0 means one epoch.
func NewBERTDataset(ctx context.Context, src TokenSource, part Split, numSamples int, cfg BERTConfig) (*BERTDataset, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	spec := mappingSpec{maxTokens: cfg.SeqLen - 3, shortSeqProb: cfg.ShortSeqProb, minSentences: 2, numSamples: numSamples}
	rows, err := sentenceMapping(ctx, "bert", src, part, cfg.Split, cfg.Seed, cfg.Name, cfg.Cache, spec)
	if err != nil {
		return nil, err
	}
	return &BERTDataset{src: src, cfg: cfg, rows: rows}, nil
}

// Len returns the number of samples.
func (d *BERTDataset) Len() int { return len(d.rows) / 3 }

// ReadSample returns sample i, or an error naming the sentence and the source when its
// tokens cannot be read. Its random choices (the A/B split point, the swap, truncation,
// masking) come from a generator seeded by (Seed, i), so sample i is the same whatever
// the data-parallel layout. It panics if i is not in [0, Len()).
func (d *BERTDataset) ReadSample(i int) (BERTSample, error) {
	if i < 0 || i >= d.Len() {
		panic(fmt.Sprintf("data: BERTDataset.Sample(%d) of %d samples", i, d.Len()))
	}
	start, end, target := int(d.rows[3*i]), int(d.rows[3*i+1]), int(d.rows[3*i+2])
	r := newRNG(d.cfg.Seed, "bert-sample", uint64(i))
	aEnd := start + 1 + r.intn(end-start-1)
	a, err := readSentences(d.src, nil, start, aEnd, -1)
	if err != nil {
		return BERTSample{}, fmt.Errorf("data: BERT sample %d: %w", i, err)
	}
	b, err := readSentences(d.src, nil, aEnd, end, -1)
	if err != nil {
		return BERTSample{}, fmt.Errorf("data: BERT sample %d: %w", i, err)
	}
	var isRandom int32
	if r.float64() < 0.5 {
		a, b, isRandom = b, a, 1
	}
	a, b = truncatePair(a, b, target, r)

	T, sp := d.cfg.SeqLen, d.cfg.Special
	s := BERTSample{
		Tokens: make([]int32, 0, T), TokenTypes: make([]int32, T), Labels: make([]int32, T),
		LossMask: make([]float32, T), PaddingMask: make([]int32, T), IsRandom: isRandom,
	}
	s.Tokens = append(s.Tokens, sp.CLS)
	s.Tokens = append(append(s.Tokens, a...), sp.SEP)
	s.Tokens = append(append(s.Tokens, b...), sp.SEP)
	n, sep1 := len(s.Tokens), 1+len(a)
	for j := range T {
		s.Labels[j] = -1
		if j < n {
			s.PaddingMask[j] = 1
		}
		if j > sep1 && j < n {
			s.TokenTypes[j] = 1
		}
	}
	maskable := func(j int) bool { return j != 0 && j != sep1 && j != n-1 }
	spec := maskSpec{prob: d.cfg.MaskProb, maxNgram: d.cfg.MaxNgram, isContinuation: d.cfg.IsContinuation}
	spans := chooseSpans(s.Tokens, maskable, spec, r)
	applyBERTMask(s.Tokens, s.Labels, spans, sp.Mask, d.cfg.VocabSize, r)
	for _, span := range spans {
		for _, j := range span {
			s.LossMask[j] = 1
		}
	}
	for len(s.Tokens) < T {
		s.Tokens = append(s.Tokens, sp.Pad)
	}
	return s, nil
}

// Sample is ReadSample for callers that cannot handle an error: it panics where
// ReadSample returns one.
func (d *BERTDataset) Sample(i int) BERTSample { return must(d.ReadSample(i)) }

// truncatePair shortens a and b until together they hold at most maxTokens tokens,
// each step removing one token from the longer (b on ties), from its front or back with
// equal probability.
func truncatePair(a, b []int32, maxTokens int, r *rng) ([]int32, []int32) {
	for len(a)+len(b) > maxTokens {
		long := &b
		if len(a) > len(b) {
			long = &a
		}
		if r.float64() < 0.5 {
			*long = (*long)[1:]
		} else {
			*long = (*long)[:len(*long)-1]
		}
	}
	return a, b
}
