package main

import (
	"context"
	"fmt"

	"megago/data"
	"megago/nn"
	"megago/parallel"
	"megago/tensor"
	"megago/train"
)

// validation is what a validation run measures, summed over the whole validation set
// (every DP rank's share) and turned into means and accuracies by its methods.
type validation struct {
	Micro                  float64 // micro-batches, all DP ranks
	LMLoss, SOPLoss        float64 // sums of micro-batch mean losses
	Masked, MLMCorrect     float64 // masked tokens, and those predicted exactly
	MLMBaseline            float64 // masked tokens equal to the training split's most frequent token
	Pairs, SOPCorrect, Swp float64 // sentence pairs, those whose order was predicted, those swapped
}

// LM returns the mean MLM loss.
func (v *validation) LM() float64 { return v.LMLoss / v.Micro }

// SOP returns the mean SOP loss.
func (v *validation) SOP() float64 { return v.SOPLoss / v.Micro }

// Loss returns the mean pretraining loss, LM + SOP, as training reports it.
func (v *validation) Loss() float64 { return v.LM() + v.SOP() }

// MLMAccuracy returns the fraction of masked tokens predicted exactly.
func (v *validation) MLMAccuracy() float64 { return v.MLMCorrect / v.Masked }

// MLMBaselineAccuracy returns the accuracy of always predicting the training split's
// most frequent token.
func (v *validation) MLMBaselineAccuracy() float64 { return v.MLMBaseline / v.Masked }

// SOPAccuracy returns the fraction of pairs whose order was predicted.
func (v *validation) SOPAccuracy() float64 { return v.SOPCorrect / v.Pairs }

// SOPBaselineAccuracy returns the share of the majority class: the accuracy of always
// predicting it.
func (v *validation) SOPBaselineAccuracy() float64 { return max(v.Swp, v.Pairs-v.Swp) / v.Pairs }

// fields returns v's counters in order, for the all-reduce.
func (v *validation) fields() []*float64 {
	return []*float64{&v.Micro, &v.LMLoss, &v.SOPLoss, &v.Masked, &v.MLMCorrect, &v.MLMBaseline, &v.Pairs, &v.SOPCorrect, &v.Swp}
}

// validator runs validation: --eval-iters global batches of the validation split, the
// same batches every time, through the pipeline with gradients off.
type validator struct {
	cfg     *config
	corp    *bertData
	mesh    *parallel.Mesh
	trainer *train.Trainer
	chunks  []*nn.BERT
	dev     *tensor.Device
}

// run returns the validation numbers, the same on every rank.
func (v *validator) run(ctx context.Context) (*validation, error) {
	cfg := v.cfg
	sampler := data.NewPretrainingSampler(v.corp.valid.Len(), 0, cfg.MicroBatchSize, v.mesh.Coord().DP, cfg.DP)
	collate := data.CollateSamples(v.corp.valid)
	pass := func(int) *nn.Pass { return nn.Eval(ctx) }
	st := &validation{}
	for k := range cfg.EvalIters {
		batches := make(bertBatches, cfg.Microbatches)
		for i := range batches {
			var err error
			if batches[i], err = collate(ctx, sampler.Batch(k*cfg.Microbatches+i)); err != nil {
				return nil, err
			}
		}
		fwd := v.forward(pass, batches.tensors(v.dev, cfg.NoBinaryHead), st)
		if _, err := v.trainer.Eval(ctx, cfg.Schedule(), fwd); err != nil {
			return nil, fmt.Errorf("validation: %w", err)
		}
	}
	return st, v.sum(ctx, st)
}

// forward is train.BERTForward that also counts, on the last stage's TP rank 0, what
// validation measures into st.
func (v *validator) forward(pass func(int) *nn.Pass, batch func(int) train.BERTBatch, st *validation) parallel.ForwardFunc {
	counting := v.mesh.Coord().TP == 0
	top := v.corp.unigram.MostFrequent()
	return func(s parallel.Step) (*tensor.Tensor, error) {
		m, p, b := v.chunks[s.Chunk], pass(s.Micro), batch(s.Micro)
		in := b.In
		in.Hidden = s.Input
		out := m.Forward(p, in)
		if !s.Last {
			return out.Hidden, nil
		}
		total, lm, sop := m.Loss(p, out, b.LMLabels, b.BinaryLabels)
		logits := parallel.GatherFromTP(p.Ctx, v.mesh.TP(), out.LMLogits.Detach()) // [B, T, Vp]
		if !counting {
			return total, nil
		}
		st.Micro++
		st.LMLoss += lm.Item()
		labels := tensor.ToSlice[int32](b.LMLabels)
		for i, id := range argmax(logits, m.Config.Vocab) {
			if labels[i] != -100 {
				st.Masked++
				st.MLMCorrect += b2f(id == labels[i])
				st.MLMBaseline += b2f(labels[i] == top)
			}
		}
		if sop != nil {
			st.SOPLoss += sop.Item()
			order := tensor.ToSlice[int32](b.BinaryLabels)
			for i, pred := range argmax(out.BinaryLogits.Detach(), 2) {
				st.Pairs++
				st.SOPCorrect += b2f(pred == order[i])
				st.Swp += float64(order[i])
			}
		}
		return total, nil
	}
}

// sum adds up st over every rank (only the last stages' TP rank 0 counted).
func (v *validator) sum(ctx context.Context, st *validation) error {
	f := st.fields()
	vals := make([]float64, len(f))
	for i, p := range f {
		vals[i] = *p
	}
	t := tensor.FromSlice(v.dev, vals, len(vals))
	defer t.Release()
	if err := v.mesh.World().AllReduce(ctx, t, parallel.Sum); err != nil {
		return fmt.Errorf("validation: %w", err)
	}
	for i, x := range tensor.ToSlice[float64](t) {
		*f[i] = x
	}
	return nil
}

// argmax returns, for each row of scores [..., N], the index of its largest value among
// the first n (the true vocabulary, not its padding).
func argmax(scores *tensor.Tensor, n int) []int32 {
	w := scores.Dim(-1)
	x := tensor.ToSlice[float32](scores)
	out := make([]int32, len(x)/w)
	for r := range out {
		row := x[r*w : r*w+n]
		best := 0
		for j, s := range row {
			if s > row[best] {
				best = j
			}
		}
		out[r] = int32(best)
	}
	return out
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
