package main

import (
	"context"
	"fmt"
	"strings"

	"megago/nn"
	"megago/parallel"
)

// filled is the sentinel filling of one validation sample.
type filled struct {
	Original  string // the sample's text, its masked spans marked «like this» ("" for --fill-text)
	Corrupted string // the encoder's input, with <extra_id_k> sentinels
	Output    string // what the decoder generated, EOS dropped
	Filled    string // the corrupted input with the generated spans in «»
	// Right counts the span tokens the generated spans have in the same place as the
	// true ones, of Total span tokens.
	Right, Total int
}

// fill fills the sentinels of --fill-text, or of validation sample --fill-sample, by
// greedy decoding with nn.GenerateT5 (the encoder runs once, the decoder with a KV
// cache) and returns the texts, the same on every rank. nn.GenerateT5 needs a model
// built without sequence parallelism: under --sequence-parallel every rank first builds
// one (its TP shard, the same parameters). The first TP group (DP rank 0) generates;
// rank 0 reports.
func fill(ctx context.Context, cfg *config, corp *trainingData, mesh *parallel.Mesh, m *nn.T5, b *nn.Builder) (*filled, error) {
	enc, truth, err := fillInput(cfg, corp)
	if err != nil {
		return nil, err
	}
	if cfg.SequenceParallel {
		if m, err = withoutSP(m, b); err != nil {
			return nil, err
		}
	}
	if mesh.Coord().DP != 0 {
		return nil, nil
	}
	o := nn.T5GenerateOptions{GenerateOptions: nn.GenerateOptions{MaxNewTokens: cfg.DecoderSeqLength,
		EOD: []int32{corp.special.EOS}}, DecoderStart: corp.start}
	out, err := nn.GenerateT5(ctx, m, [][]int32{enc}, o)
	if err != nil {
		return nil, fmt.Errorf("filling the sentinels: %w", err)
	}
	gen := out[0]
	if len(gen) > 0 && gen[len(gen)-1] == corp.special.EOS {
		gen = gen[:len(gen)-1]
	}
	got := corp.spans(gen)
	f := &filled{Corrupted: corp.tok.Decode(enc), Output: corp.tok.Decode(gen), Filled: corp.fillIn(enc, got)}
	if truth == nil {
		return f, nil
	}
	want := corp.spans(truth)
	f.Original = corp.fillIn(enc, want)
	for k, span := range want {
		f.Total += len(span)
		for j, id := range span {
			if j < len(got[k]) && got[k][j] == id {
				f.Right++
			}
		}
	}
	return f, nil
}

// fills reports whether the run ends by filling sentinels: those of --fill-text, or of
// validation sample --fill-sample unless it is -1 or there is no validation split.
func (c *config) fills(corp *trainingData) bool {
	return c.FillText != "" || c.FillSample >= 0 && corp.valid != nil
}

// fillInput returns the encoder input to fill and the decoder sequence that fills it
// right (nil for --fill-text).
func fillInput(cfg *config, corp *trainingData) (enc, truth []int32, err error) {
	if cfg.FillText != "" {
		enc = corp.tok.Encode(cfg.FillText)
		for _, id := range enc {
			if corp.sentinel(id) {
				return enc, nil, nil
			}
		}
		return nil, nil, fmt.Errorf("--fill-text %q has no sentinel to fill (write <extra_id_0>, <extra_id_1>, ...)", cfg.FillText)
	}
	if cfg.FillSample >= corp.valid.Len() {
		return nil, nil, fmt.Errorf("--fill-sample %d: the validation split has %d samples", cfg.FillSample, validLen(corp))
	}
	s, err := corp.valid.ReadSample(cfg.FillSample)
	if err != nil {
		return nil, nil, fmt.Errorf("--fill-sample %d: %w", cfg.FillSample, err)
	}
	n := 0
	for n < len(s.EncPaddingMask) && s.EncPaddingMask[n] == 1 {
		n++
	}
	for j, l := range s.Labels {
		if s.LossMask[j] == 1 {
			truth = append(truth, l)
		}
	}
	return s.EncTokens[:n], truth, nil
}

// spans splits a decoder sequence (sentinel, span, sentinel, span, ..., maybe EOS) into
// the span of each sentinel, by sentinel id.
func (corp *trainingData) spans(dec []int32) map[int32][]int32 {
	out := map[int32][]int32{}
	cur := int32(-1)
	for _, id := range dec {
		switch {
		case corp.sentinel(id):
			cur = id
			out[cur] = []int32{}
		case id == corp.special.EOS:
			return out
		case cur >= 0:
			out[cur] = append(out[cur], id)
		}
	}
	return out
}

// fillIn returns the text of enc with each sentinel replaced by its span in «»; a
// sentinel without one stays.
func (corp *trainingData) fillIn(enc []int32, spans map[int32][]int32) string {
	var b strings.Builder
	run := 0 // start of the current run of text tokens
	for i, id := range enc {
		span, ok := spans[id]
		if !ok || !corp.sentinel(id) {
			continue
		}
		b.WriteString(corp.tok.Decode(enc[run:i]))
		b.WriteString("«" + corp.tok.Decode(span) + "»")
		run = i + 1
	}
	b.WriteString(corp.tok.Decode(enc[run:]))
	return b.String()
}

// withoutSP returns this rank's TP shard of m built without sequence parallelism, with
// m's parameters (sequence parallelism changes no parameter).
func withoutSP(m *nn.T5, b *nn.Builder) (*nn.T5, error) {
	whole := &nn.Builder{Dev: b.Dev, DType: b.DType, RNG: b.RNG, TP: b.TP}
	c, err := nn.NewT5(whole, m.Config, nn.Stage{})
	if err != nil {
		return nil, err
	}
	src, dst := m.Params(), c.Params()
	for i, p := range dst {
		p.Tensor.Detach().CopyFrom(src[i].Tensor)
	}
	return c, nil
}
