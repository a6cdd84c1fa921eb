package data

import (
	"context"
	"fmt"
	"slices"
)

// t5SpanP is the success probability of T5's geometric span lengths.
const t5SpanP = 0.2

// T5Config configures a T5Dataset. The zero value of each field is its default where the
// comment gives one.
type T5Config struct {
	// EncSeqLen is the encoder length Te (Megatron's --seq-length, e.g. 512).
	EncSeqLen int
	// DecSeqLen is the decoder length Td (Megatron's --decoder-seq-length, e.g. 128).
	// Masking stops adding spans before the decoder sequence would exceed it.
	DecSeqLen int
	// Seed seeds the sample mapping and, with the sample index, each sample's masking.
	Seed uint64
	// Split is Megatron's --split over documents; "" means DefaultSplit.
	Split string
	// MaskProb is the fraction of tokens masked; zero means 0.15.
	MaskProb float64
	// MaxSpan is the longest span in whole words; zero means 10. Lengths are geometric
	// with p = 0.2, clipped to MaxSpan.
	MaxSpan int
	// ShortSeqProb is the probability that a sample targets a random shorter length
	// (Megatron's default is 0.1; zero means never).
	ShortSeqProb float64
	// IsContinuation reports whether a token continues the word before it, for
	// whole-word masking; nil makes every token a word.
	IsContinuation func(id int32) bool
	// Special gives EOS, the padding id and the sentinels (which bound the number of spans
	// per sample), all required, and BOS, the decoder's start: when it is -1 (T5's
	// SentencePiece vocabularies have none) the padding id starts the decoder, as Hugging
	// Face's T5 does (decoder_start_token_id = pad_token_id).
	Special SpecialIDs
	// Name identifies the source in the cache key (see GPTConfig.Name).
	Name string
	// Cache says where the sample mapping is cached and which rank builds it.
	Cache IndexCache
}

func (c T5Config) withDefaults() T5Config {
	if c.MaskProb == 0 {
		c.MaskProb = 0.15
	}
	if c.MaxSpan == 0 {
		c.MaxSpan = 10
	}
	return c
}

// Validate reports the first invalid field.
func (c T5Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.EncSeqLen < 2:
		return fmt.Errorf("data: T5Config.EncSeqLen = %d, want ≥ 2", c.EncSeqLen)
	case c.DecSeqLen < 3:
		return fmt.Errorf("data: T5Config.DecSeqLen = %d, want ≥ 3", c.DecSeqLen)
	case !(c.MaskProb > 0 && c.MaskProb <= 1):
		return fmt.Errorf("data: T5Config.MaskProb = %v, want in (0, 1]", c.MaskProb)
	case c.MaxSpan < 1:
		return fmt.Errorf("data: T5Config.MaxSpan = %d, want ≥ 1", c.MaxSpan)
	case !(c.ShortSeqProb >= 0 && c.ShortSeqProb <= 1):
		return fmt.Errorf("data: T5Config.ShortSeqProb = %v, want in [0, 1]", c.ShortSeqProb)
	case c.Special.EOS < 0 || c.Special.Pad < 0 || len(c.Special.Sentinels) == 0:
		return fmt.Errorf("data: T5Config.Special needs EOS, Pad and sentinels, got %d, %d and %d sentinels",
			c.Special.EOS, c.Special.Pad, len(c.Special.Sentinels))
	}
	_, err := ParseSplit(c.Split)
	return err
}

// T5Dataset serves T5 span-corruption samples. Each sequence of the source is a
// sentence; a sample is consecutive sentences of one document. It is safe for concurrent
// use.
type T5Dataset struct {
	src  TokenSource
	cfg  T5Config
	rows []int64 // [3N] (first sentence, end sentence, target tokens)
}

// T5Sample is one sample. The encoder attends bidirectionally over EncPaddingMask, the
// decoder causally over DecPaddingMask, and cross-attention sees EncPaddingMask.
//
// Each masked span (whole words, never overlapping) is replaced in the encoder input by
// one sentinel, sentinels being used in order; with spans in order of position,
// Labels = Σ (sentinel_k + span_k) + [EOS] and DecInput = [start] + Σ (sentinel_k + span_k),
// that is Labels shifted right by one, where start is BOS, or Pad when there is no BOS
// (see T5Config.Special).
type T5Sample struct {
	EncTokens      []int32   // [Te] the corrupted text, then padding
	DecInput       []int32   // [Td] [start] + Σ(sentinel + span), then padding
	Labels         []int32   // [Td] Σ(sentinel + span) + [EOS], then −1
	LossMask       []float32 // [Td] 1 on real labels
	EncPaddingMask []int32   // [Te] 1 on real tokens
	DecPaddingMask []int32   // [Td] 1 on real tokens
}

// NewT5Dataset builds (or loads from cfg.Cache) the sample mapping of split part of src
// for at least numSamples samples; numSamples ≤ 0 means one epoch.
func NewT5Dataset(ctx context.Context, src TokenSource, part Split, numSamples int, cfg T5Config) (*T5Dataset, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	spec := mappingSpec{maxTokens: cfg.EncSeqLen, shortSeqProb: cfg.ShortSeqProb, minSentences: 1, numSamples: numSamples}
	rows, err := sentenceMapping(ctx, "t5", src, part, cfg.Split, cfg.Seed, cfg.Name, cfg.Cache, spec)
	if err != nil {
		return nil, err
	}
	return &T5Dataset{src: src, cfg: cfg, rows: rows}, nil
}

// DecoderStart returns the first decoder input of every sample: BOS, or Pad when the
// tokenizer has no BOS.
func (d *T5Dataset) DecoderStart() int32 {
	if d.cfg.Special.BOS >= 0 {
		return d.cfg.Special.BOS
	}
	return d.cfg.Special.Pad
}

// Len returns the number of samples.
func (d *T5Dataset) Len() int { return len(d.rows) / 3 }

// Source returns the uncorrupted tokens of sample i: its sentences, truncated to the
// sample's target length. It panics if i is not in [0, Len()) or the tokens cannot be
// read (ReadSample returns that error).
func (d *T5Dataset) Source(i int) []int32 {
	if i < 0 || i >= d.Len() {
		panic(fmt.Sprintf("data: T5Dataset.Source(%d) of %d samples", i, d.Len()))
	}
	return must(d.readSource(i))
}

// readSource returns the tokens of Source(i), or an error naming the sentence.
func (d *T5Dataset) readSource(i int) ([]int32, error) {
	start, end, target := int(d.rows[3*i]), int(d.rows[3*i+1]), int(d.rows[3*i+2])
	toks, err := readSentences(d.src, nil, start, end, target)
	if err != nil {
		return nil, fmt.Errorf("data: T5 sample %d: %w", i, err)
	}
	return toks, nil
}

// Sample is ReadSample for callers that cannot handle an error: it panics where
// ReadSample returns one.
func (d *T5Dataset) Sample(i int) T5Sample { return must(d.ReadSample(i)) }

// ReadSample returns sample i, or an error naming the sentence and the source when its
// tokens cannot be read; its masking comes from a generator seeded by (Seed, i), so it
// is the same whatever the data-parallel layout. It panics if i is not in [0, Len()).
func (d *T5Dataset) ReadSample(i int) (T5Sample, error) {
	if i < 0 || i >= d.Len() {
		panic(fmt.Sprintf("data: T5Dataset.Sample(%d) of %d samples", i, d.Len()))
	}
	toks, err := d.readSource(i)
	if err != nil {
		return T5Sample{}, err
	}
	r := newRNG(d.cfg.Seed, "t5-sample", uint64(i))
	spec := maskSpec{
		prob: d.cfg.MaskProb, maxNgram: d.cfg.MaxSpan, geometricP: t5SpanP, isContinuation: d.cfg.IsContinuation,
		maxSpans: len(d.cfg.Special.Sentinels), maxCost: d.cfg.DecSeqLen - 1,
	}
	spans := chooseSpans(toks, func(int) bool { return true }, spec, r)
	slices.SortFunc(spans, func(x, y []int) int { return x[0] - y[0] })

	sp, Te, Td := d.cfg.Special, d.cfg.EncSeqLen, d.cfg.DecSeqLen
	enc := make([]int32, 0, Te)
	dec := make([]int32, 0, Td)
	dec = append(dec, d.DecoderStart())
	next := 0
	for k, span := range spans {
		sentinel := sp.Sentinels[k]
		enc = append(append(enc, toks[next:span[0]]...), sentinel)
		dec = append(dec, sentinel)
		for _, j := range span {
			dec = append(dec, toks[j])
		}
		next = span[len(span)-1] + 1
	}
	enc = append(enc, toks[next:]...)
	labels := append(slices.Clone(dec[1:]), sp.EOS)

	s := T5Sample{
		EncTokens: enc, DecInput: dec, Labels: labels,
		LossMask: make([]float32, Td), EncPaddingMask: make([]int32, Te), DecPaddingMask: make([]int32, Td),
	}
	for j := range Te {
		if j < len(enc) {
			s.EncPaddingMask[j] = 1
		} else {
			s.EncTokens = append(s.EncTokens, sp.Pad)
		}
	}
	for j := range Td {
		if j < len(dec) {
			s.DecPaddingMask[j], s.LossMask[j] = 1, 1
		} else {
			s.DecInput = append(s.DecInput, sp.Pad)
			s.Labels = append(s.Labels, -1)
		}
	}
	return s, nil
}
