package main

import (
	"context"

	"megago/data"
	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// t5Batch is one micro-batch of span-corruption samples, row-major.
type t5Batch struct {
	B, Te, Td  int
	Enc        []int32 // [B*Te] corrupted text, then padding
	EncAttend  []int32 // [B*Te] 1 on real tokens
	Dec        []int32 // [B*Td] decoder input: start, then Σ(sentinel + span), then padding
	Labels     []int32 // [B*Td] Σ(sentinel + span) + EOS, -100 elsewhere (ignored by the loss)
	SpanTokens []bool  // [B*Td] labels that are tokens of a span (not a sentinel or EOS)
}

// collateT5 returns a Loader collate function reading micro-batches of ds; sentinel
// reports whether an id is a sentinel, eos is the end of the targets.
func collateT5(ds data.Dataset[data.T5Sample], sentinel func(int32) bool, eos int32) func(context.Context, []int) (t5Batch, error) {
	read := data.CollateSamples(ds)
	return func(ctx context.Context, indices []int) (t5Batch, error) {
		samples, err := read(ctx, indices)
		if err != nil {
			return t5Batch{}, err
		}
		return makeBatch(samples, sentinel, eos), nil
	}
}

// makeBatch lays samples out as a micro-batch.
func makeBatch(samples []data.T5Sample, sentinel func(int32) bool, eos int32) t5Batch {
	b := t5Batch{B: len(samples), Te: len(samples[0].EncTokens), Td: len(samples[0].DecInput)}
	for _, s := range samples {
		b.Enc = append(b.Enc, s.EncTokens...)
		b.EncAttend = append(b.EncAttend, s.EncPaddingMask...)
		b.Dec = append(b.Dec, s.DecInput...)
		for j, l := range s.Labels {
			if s.LossMask[j] == 0 {
				l = -100
			}
			b.Labels = append(b.Labels, l)
			b.SpanTokens = append(b.SpanTokens, l >= 0 && l != eos && !sentinel(l))
		}
	}
	return b
}

// input returns the batch as the model reads it. The decoder needs no padding mask: its
// padding comes after the real tokens, which the causal mask already hides from them.
func (b t5Batch) input(dev *tensor.Device) (nn.T5Input, *tensor.Tensor) {
	return nn.T5Input{
		IDs:        tensor.FromSlice(dev, b.Enc, b.B, b.Te),       // [B, Te]
		Attend:     tensor.FromSlice(dev, b.EncAttend, b.B, b.Te), // [B, Te]
		DecoderIDs: tensor.FromSlice(dev, b.Dec, b.B, b.Td),       // [B, Td]
	}, tensor.FromSlice(dev, b.Labels, b.B, b.Td) // [B, Td]
}

// t5Forward returns the forward-step function of a T5 (one pipeline stage: T5 runs with
// TP and DP only): each micro-batch's mean cross entropy over its labelled tokens.
func t5Forward(m *nn.T5, pass func(micro int) *nn.Pass, batches []t5Batch, dev *tensor.Device) parallel.ForwardFunc {
	return func(s parallel.Step) (*tensor.Tensor, error) {
		p := pass(s.Micro)
		in, labels := batches[s.Micro].input(dev)
		loss, _ := m.Loss(p, m.Forward(p, in), labels)
		return loss, nil
	}
}

// spanScore counts, over validation micro-batches, the loss, the span tokens that the
// model predicts right (teacher-forced) and how often each token is a span token, for
// the baseline: always predicting the most frequent one. At a span token the model
// also weighs ending the span there (the next sentinel, or EOS), and since that one
// outcome is often likelier than any single word, the argmax over the whole vocabulary
// is often a sentinel; the accuracy asks which token the model would put there: the
// argmax over the text tokens (not sentinels, EOS, pad or BOS). correctAny counts the
// argmax over the whole vocabulary.
type spanScore struct {
	loss                       float64   // sum of the micro-batches' mean losses
	batches                    float64   // micro-batches
	spans, correct, correctAny float64   // span tokens; predicted right among text tokens; among all
	counts                     []float64 // [V] span tokens by id
}

// add scores one micro-batch on every rank of the TP group (logits are gathered); text
// [V] tells the text tokens.
func (sc *spanScore) add(ctx context.Context, m *nn.T5, tp parallel.Comm, b t5Batch, dev *tensor.Device, text []bool) {
	v := m.Config.Vocab
	if sc.counts == nil {
		sc.counts = make([]float64, v)
	}
	s := dev.NewScope()
	defer s.Close()
	p := nn.Eval(ctx)
	dev.NoGrad(func() {
		in, labels := b.input(dev)
		logits := m.Forward(p, in) // [B, Td, Vp/tp]
		loss, _ := m.Loss(p, logits, labels)
		sc.loss += loss.Item()
		sc.batches++
		full := tensor.ToSlice[float32](parallel.GatherFromTP(ctx, tp, logits)) // [B, Td, Vp]
		vp := len(full) / (b.B * b.Td)
		for j, span := range b.SpanTokens {
			if !span {
				continue
			}
			row := full[j*vp : j*vp+v]
			sc.spans++
			sc.counts[b.Labels[j]]++
			if argmax(row, text) == b.Labels[j] {
				sc.correct++
			}
			if argmax(row, nil) == b.Labels[j] {
				sc.correctAny++
			}
		}
	})
}

// argmax returns the index of the first largest value among those that allowed marks
// (nil: all).
func argmax(x []float32, allowed []bool) int32 {
	best := -1
	for j, v := range x {
		if (allowed == nil || allowed[j]) && (best < 0 || v > x[best]) {
			best = j
		}
	}
	return int32(best)
}
