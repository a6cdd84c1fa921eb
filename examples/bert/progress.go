package main

import (
	"fmt"
	"io"
	"math"

	"megago/examples/internal/report"
	"megago/nn"
	"megago/tensor"
)

// What rank 0 prints and writes (package report): progress lines, metrics.jsonl,
// TensorBoard files and the loss curve, and the lines below, which say what runs and
// how it went. Other ranks hold a nil *report.Report, whose methods do nothing.

// newReport opens the output files under cfg.OutDir; vp is the padded vocabulary. The
// training loss is MLM + SOP ("loss", "total loss"), or MLM alone without the binary
// head (Megatron's "lm loss").
func newReport(out io.Writer, cfg *config, vp int) (*report.Report, error) {
	o := report.Options{OutDir: cfg.OutDir, TensorboardDir: cfg.TensorboardDir, Iters: cfg.TrainIters,
		LogInterval: cfg.LogInterval, TokensPerIter: cfg.GlobalBatchSize * cfg.SeqLength,
		FLOPsPerIter: cfg.FLOPs(vp), Ranks: cfg.World, Model: "BERT"}
	if !cfg.NoBinaryHead {
		o.LossKey, o.LossTag = "loss", "total loss"
	}
	return report.New(out, o)
}

// header prints what is about to run.
func header(r *report.Report, cfg *config, corp *bertData, m nn.BERTConfig, params int64, dev *tensor.Device) {
	if r == nil {
		return
	}
	tc := m.TransformerConfig.Defaults()
	vp := nn.PaddedVocab(tc.Vocab, m.VocabMultiple, cfg.TP)
	top := corp.unigram.MostFrequent()
	r.Printf("data: %s\n", corp.about)
	r.Printf("      training split: %s tokens; their unigram entropy is %.3f nats; the most frequent token is %q (%.1f%%)\n",
		report.Thousands(float64(corp.unigram.Total)), corp.unigram.Entropy(), corp.tok.Decode([]int32{top}),
		100*float64(corp.unigram.Counts[top])/float64(corp.unigram.Total))
	task := "masked language modelling (--mask-prob %g) and sentence order prediction"
	if m.NoBinaryHead {
		task = "masked language modelling (--mask-prob %g)"
	}
	r.Printf("task: "+task+"; samples [CLS] A [SEP] B [SEP] of up to %d tokens, shorter with probability %g\n",
		cfg.MaskProb, cfg.SeqLength, cfg.ShortSeqProb)
	r.Printf("model: BERT (post-LN, as Hugging Face's), %d layers, hidden %d, %d heads, seq %d, vocab %d (padded to %d): %s parameters, %s on %s\n",
		tc.NumLayers, tc.Hidden, tc.Heads, cfg.SeqLength, tc.Vocab, vp, report.Thousands(float64(params)), cfg.DType(), dev)
	r.Printf("layout: %d rank(s) = TP %d × PP %d × DP %d; %v; %d micro-batch(es) of %d per DP rank; global batch %d (%s tokens)\n",
		cfg.World, cfg.TP, cfg.PP, cfg.DP, cfg.Schedule(), cfg.Microbatches, cfg.MicroBatchSize, cfg.GlobalBatchSize,
		report.Thousands(float64(cfg.GlobalBatchSize*cfg.SeqLength)))
	r.Printf("optimizer: AdamW, lr %g → %g (%s, warmup %d), weight decay %g, clip %g\n",
		cfg.LR, cfg.MinLR, cfg.LRDecayStyle, cfg.WarmupIters(), cfg.WeightDecay, cfg.ClipGrad)
	r.Printf("training %d iterations; output in %s\n", cfg.TrainIters, r.Dir())
}

// eval records a validation run at iteration it.
func eval(r *report.Report, it int, v *validation) {
	vs := []report.Value{{Label: "lm loss", Format: "%.4f", Key: "lm_loss", Tag: "lm loss validation", V: v.LM()},
		{Label: "MLM accuracy", Format: "%.3f", Key: "mlm_accuracy", Tag: "mlm accuracy validation", V: v.MLMAccuracy()},
		{Label: "baseline", Format: "%.3f", Key: "mlm_baseline", V: v.MLMBaselineAccuracy()}}
	if v.Pairs > 0 {
		vs = append(vs, report.Value{Label: "sop loss", Format: "%.4f", Key: "sop_loss", Tag: "sop loss validation", V: v.SOP()},
			report.Value{Label: "SOP accuracy", Format: "%.3f", Key: "sop_accuracy", Tag: "sop accuracy validation", V: v.SOPAccuracy()},
			report.Value{Label: "baseline", Format: "%.3f", Key: "sop_baseline", V: v.SOPBaselineAccuracy()})
	}
	r.Eval(it, v.Loss(), vs...)
}

// finish prints the summary of the run.
func finish(r *report.Report, sum *summary, corp *bertData) {
	if r == nil {
		return
	}
	r.Done(sum.Iterations, sum.Wall)
	if v := sum.Valid; v != nil {
		r.Printf("validation: MLM accuracy %.3f, %.1f× the %.3f of always predicting the most frequent token %q\n",
			v.MLMAccuracy(), v.MLMAccuracy()/v.MLMBaselineAccuracy(), v.MLMBaselineAccuracy(),
			corp.tok.Decode([]int32{corp.unigram.MostFrequent()}))
		if v.Pairs > 0 {
			r.Printf("validation: sentence-order accuracy %.3f; always predicting the majority class gives %.3f\n",
				v.SOPAccuracy(), v.SOPBaselineAccuracy())
		}
	}
	r.Files()
	h := corp.unigram.Entropy()
	if sum.Valid != nil && sum.Valid.Pairs > 0 {
		r.Reference(h+math.Ln2, fmt.Sprintf("unigram entropy + ln 2 = %.2f", h+math.Ln2))
	} else {
		r.Reference(h, fmt.Sprintf("unigram entropy %.2f", h))
	}
}
