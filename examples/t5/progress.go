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

// newReport opens the output files under cfg.OutDir. An iteration's tokens are the
// encoder's and the decoder's positions of the global batch.
func newReport(out io.Writer, cfg *config, m nn.T5Config) (*report.Report, error) {
	return report.New(out, report.Options{OutDir: cfg.OutDir, TensorboardDir: cfg.TensorboardDir, Iters: cfg.TrainIters,
		LogInterval: cfg.LogInterval, TokensPerIter: cfg.GlobalBatchSize * (cfg.SeqLength + cfg.DecoderSeqLength),
		FLOPsPerIter: cfg.flopsPerIteration(m), Ranks: cfg.World, Model: "T5"})
}

// header prints what is about to run.
func header(r *report.Report, cfg *config, corp *trainingData, m nn.T5Config, params int64, dev *tensor.Device) {
	if r == nil {
		return
	}
	tc := m.TransformerConfig.Defaults()
	vp := nn.PaddedVocab(tc.Vocab, m.VocabMultiple, cfg.TP)
	sp := corp.special
	r.Printf("data: %s\n", corp.about)
	r.Printf("      %s training samples, %s validation samples\n", report.Thousands(float64(corp.train.Len())), report.Thousands(float64(validLen(corp))))
	r.Printf("      span corruption: %.0f%% of each sample's tokens in spans, each replaced by one of %d sentinels (ids %d..%d); EOS %d, decoder start %d\n",
		100*cfg.MaskProb, len(sp.Sentinels), sp.Sentinels[0], sp.Sentinels[len(sp.Sentinels)-1], sp.EOS, corp.start)
	r.Printf("model: T5, %d encoder + %d decoder layers, hidden %d, %d heads of %d, MLP %d, encoder seq %d, decoder seq %d, vocab %d (padded to %d): %s parameters, %s on %s\n",
		tc.NumLayers, m.DecoderLayers, tc.Hidden, tc.Heads, tc.HeadSize, tc.FFNHidden, cfg.SeqLength, cfg.DecoderSeqLength,
		tc.Vocab, vp, report.Thousands(float64(params)), cfg.DType(), dev)
	r.Printf("layout: %d rank(s) = TP %d × DP %d; %d micro-batch(es) of %d per DP rank; global batch %d (%s encoder + decoder tokens)\n",
		cfg.World, cfg.TP, cfg.DP, cfg.Microbatches, cfg.MicroBatchSize, cfg.GlobalBatchSize,
		report.Thousands(float64(cfg.GlobalBatchSize*(cfg.SeqLength+cfg.DecoderSeqLength))))
	r.Printf("optimizer: AdamW, lr %g → %g (%s, warmup %d), weight decay %g, clip %g\n",
		cfg.LR, cfg.MinLR, cfg.LRDecayStyle, cfg.WarmupIters(), cfg.WeightDecay, cfg.ClipGrad)
	r.Printf("training %d iterations; output in %s\n", cfg.TrainIters, r.Dir())
}

// validLen returns the number of validation samples (0 without validation).
func validLen(corp *trainingData) int {
	if corp.valid == nil {
		return 0
	}
	return corp.valid.Len()
}

// eval records a validation run at iteration it.
func eval(r *report.Report, it int, s score) {
	r.Eval(it, s.Loss, report.Value{Label: "lm loss", Format: "%.4f", Key: "lm_loss", Tag: "lm loss validation", V: s.Loss},
		report.Value{Label: "span-token accuracy", Format: "%.4f", Key: "span_accuracy", Tag: "span accuracy validation", V: s.Accuracy},
		report.Value{Label: "baseline", Format: "%.4f", Key: "span_accuracy_baseline", V: s.Baseline},
		report.Value{Label: "argmax over all ids", Format: "%.4f", Key: "span_accuracy_any", V: s.AccuracyAny})
}

// finish prints the summary of the run.
func finish(r *report.Report, sum *summary, corp *trainingData) {
	if r == nil {
		return
	}
	r.Done(sum.Iterations, sum.Wall)
	if v := sum.Valid; !math.IsNaN(v.Loss) {
		r.Printf("validation: span-token accuracy %.4f on %s span tokens, %.2f× the baseline %.4f (always %q, the most frequent of them)\n",
			v.Accuracy, report.Thousands(float64(v.Spans)), v.Accuracy/v.Baseline, v.Baseline, corp.tok.Decode([]int32{v.Frequent}))
		r.Printf("            (the model's argmax among text tokens; among all ids it is right on %.4f: it often bets that the span ends there)\n",
			v.AccuracyAny)
	}
	r.Files()
}

// printFill prints the sentinel filling of --fill-text or validation sample i.
func printFill(r *report.Report, i int, f *filled) {
	if r == nil || f == nil {
		return
	}
	if f.Original != "" {
		r.Printf("validation sample %d, its masked spans in «»:\n----\n%s\n----\n", i, f.Original)
	}
	r.Printf("corrupted (the encoder's input):\n----\n%s\n----\n", f.Corrupted)
	r.Printf("greedy decoding (encoder once, decoder with a KV cache): %s\n", f.Output)
	right := ""
	if f.Original != "" {
		right = fmt.Sprintf("; %d of %d span tokens right", f.Right, f.Total)
	}
	r.Printf("filled in («» around the generated spans%s):\n----\n%s\n----\n", right, f.Filled)
}
