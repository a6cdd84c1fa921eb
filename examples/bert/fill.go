package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"megago/data"
	"megago/examples/internal/corpus"
	"megago/examples/internal/report"
	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// fill is the masked line of --fill-text: the sentence pair [CLS] A [SEP] B [SEP] of its
// lines (A up to and including the masked line, or all but the last line when the
// masked line is the last) with the masked line's tokens replaced by [MASK].
type fill struct {
	tok            data.Tokenizer
	sample         data.BERTSample
	masked         []int  // positions of the masked tokens in sample.Tokens
	before, after  string // the text around the masked line
	line, position int    // the masked line's text index and its number
	truth          string
}

// newFill lays out --fill-text; the tokens are encoded line by line, as the corpus is.
func newFill(cfg *config, tok data.Tokenizer) (*fill, error) {
	lines := corpus.Lines(cfg.FillText) // at least 2, and FillLine one of them (parseConfig)
	k := cfg.FillLine
	split := k + 1 // A = lines[:split], B = lines[split:]
	if split == len(lines) {
		split = k
	}
	sp := tok.Special()
	f := &fill{tok: tok, line: k, truth: strings.TrimRight(lines[k], "\n"),
		before: strings.Join(lines[:k], ""), after: strings.Join(lines[k+1:], "")}
	s := &f.sample
	s.Tokens = []int32{sp.CLS}
	for i, l := range lines {
		if i == split {
			s.Tokens = append(s.Tokens, sp.SEP)
		}
		ids := tok.Encode(l)
		for range ids {
			if i == k {
				f.masked = append(f.masked, len(s.Tokens))
			}
			s.Tokens = append(s.Tokens, sp.Mask)
		}
		if i != k {
			copy(s.Tokens[len(s.Tokens)-len(ids):], ids)
		}
	}
	s.Tokens = append(s.Tokens, sp.SEP)
	n, t := len(s.Tokens), cfg.SeqLength
	if n > t {
		return nil, fmt.Errorf("--fill-text is %d tokens as a sentence pair, more than --seq-length %d", n, t)
	}
	s.TokenTypes, s.PaddingMask, s.Labels, s.LossMask = make([]int32, t), make([]int32, t), make([]int32, t), make([]float32, t)
	segB := false
	for j := range t {
		if j < n {
			s.PaddingMask[j] = 1
			s.TokenTypes[j] = int32(b2i(segB))
			segB = segB || j > 0 && s.Tokens[j] == sp.SEP
		} else {
			s.Tokens = append(s.Tokens, sp.Pad)
		}
	}
	for _, j := range f.masked {
		s.LossMask[j] = 1
	}
	return f, nil
}

// run fills the masked tokens one at a time, left to right, and returns the filled line. Every rank calls it; the pipeline runs each step
// with --micro-batch-size copies of the sample, as validation does.
func (f *fill) run(ctx context.Context, v *validator) (string, error) {
	cfg := v.cfg
	s := f.sample
	s.Tokens = append([]int32(nil), s.Tokens...)
	left := append([]int(nil), f.masked...)
	pass := func(int) *nn.Pass { return nn.Eval(ctx) }
	for len(left) > 0 {
		var pick [2]float64 // position+1, token+1: the last stage's TP rank 0 sets it
		batch := make([]data.BERTSample, cfg.MicroBatchSize)
		for i := range batch {
			batch[i] = s
		}
		fwd := func(st parallel.Step) (*tensor.Tensor, error) {
			m, p := v.chunks[st.Chunk], pass(st.Micro)
			in := bertTensors(v.dev, batch, true).In
			in.Hidden, in.LMPositions = st.Input, nil // every position's scores
			out := m.Forward(p, in)
			if !st.Last {
				return out.Hidden, nil
			}
			logits := parallel.GatherFromTP(p.Ctx, v.mesh.TP(), out.LMLogits.Detach()) // [B, T, Vp]
			if v.mesh.Coord().TP == 0 {
				pick = nextToken(logits, m.Config.Vocab, left)
			}
			return tensor.Scalar(v.dev, tensor.F32, 0), nil
		}
		if _, err := v.trainer.Eval(ctx, cfg.Schedule(), fwd); err != nil {
			return "", fmt.Errorf("filling in the masked line: %w", err)
		}
		t := tensor.FromSlice(v.dev, pick[:2], 2)
		if err := v.mesh.World().AllReduce(ctx, t, parallel.Max); err != nil { // only one rank's pick is not zero
			return "", err
		}
		got := tensor.ToSlice[float64](t)
		pos, id := int(got[0])-1, int32(got[1])-1
		s.Tokens[pos] = id
		for i, j := range left {
			if j == pos {
				left = append(left[:i], left[i+1:]...)
				break
			}
		}
	}
	ids := make([]int32, len(f.masked))
	for i, j := range f.masked {
		ids[i] = s.Tokens[j]
	}
	return strings.TrimRight(f.tok.Decode(ids), "\n"), nil
}

// nextToken returns, of the positions left of the first sequence of logits [B, T, Vp],
// the first (leftmost) with its most likely token of the first vocab, as
// {position+1, token+1}: the line is filled left to right, each token given the ones
// before it and the rest of the snippet.
func nextToken(logits *tensor.Tensor, vocab int, left []int) [2]float64 {
	vp := logits.Dim(-1)
	x := tensor.ToSlice[float32](logits.Narrow(0, 0, 1))
	j := slices.Min(left)
	row := x[j*vp : j*vp+vocab]
	arg := 0
	for i, v := range row {
		if v > row[arg] {
			arg = i
		}
	}
	return [2]float64{float64(j + 1), float64(arg + 1)}
}

// fillIn fills the line in (run) and reports it; nothing without --fill-text (f nil).
func (f *fill) fillIn(ctx context.Context, v *validator, rep *report.Report) (string, error) {
	if f == nil {
		return "", nil
	}
	filled, err := f.run(ctx, v)
	if err != nil {
		return "", err
	}
	f.report(rep, filled)
	return filled, nil
}

// report prints the snippet with the model's line in place of the masked one.
func (f *fill) report(rep *report.Report, filled string) {
	rep.Printf("filled in line %d of --fill-text (%d masked tokens, left to right):\n----\n%s%s\n%s----\n",
		f.line, len(f.masked), f.before, filled, f.after)
	verdict := "differs from"
	if filled == f.truth {
		verdict = "is"
	}
	rep.Printf("the model's line %s the original: %q\n", verdict, f.truth)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
