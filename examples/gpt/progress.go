package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"strings"

	"megago/examples/internal/report"
	"megago/nn"
	"megago/tensor"
)

// What rank 0 prints and writes (package report): progress lines, metrics.jsonl,
// TensorBoard files and the loss curve, and the lines below, which say what runs and
// how it went. Other ranks hold a nil *report.Report, whose methods do nothing.

// newReport opens the output files under cfg.OutDir; tokens and flops are per
// iteration.
func newReport(out io.Writer, cfg *config, tokens int, flops float64) (*report.Report, error) {
	return report.New(out, report.Options{OutDir: cfg.OutDir, TensorboardDir: cfg.TensorboardDir, Iters: cfg.TrainIters,
		LogInterval: cfg.LogInterval, TokensPerIter: tokens, FLOPsPerIter: flops, Ranks: cfg.World, Model: "GPT"})
}

// header prints what is about to run.
func header(r *report.Report, cfg *config, corp *trainingData, m nn.GPTConfig, params int64, dev *tensor.Device) {
	if r == nil {
		return
	}
	tc := m.TransformerConfig.Defaults()
	vp := nn.PaddedVocab(tc.Vocab, m.VocabMultiple, cfg.TP)
	r.Printf("data: %s\n", corp.about)
	r.Printf("      training split: %s tokens; their unigram entropy is %.3f nats (the loss of a model that ignores context)\n",
		report.Thousands(float64(corp.unigram.Total)), corp.entropy())
	arch := cfg.Arch.Describe()
	if cfg.UntieEmbeddings {
		arch = strings.TrimPrefix(arch+", untied output layer", ", ")
	}
	if arch != "" {
		arch = " (" + arch + ")"
	}
	r.Printf("model: GPT%s, %d layers, hidden %d, %d heads, seq %d, vocab %d (padded to %d): %s parameters, %s on %s\n",
		arch, tc.NumLayers, tc.Hidden, tc.Heads, cfg.SeqLength, tc.Vocab, vp, report.Thousands(float64(params)), cfg.DType(), dev)
	if d := cfg.Docs.describe(); d != "" {
		r.Printf("documents: %s (each sample's documents apart at the end-of-document token)\n", d)
	}
	if moe := cfg.MoE.Describe(); moe != "" {
		r.Printf("experts: %s\n", moe)
	}
	cp := "" // context parallelism: the CP size and how attention exchanges keys and values
	if cfg.CP.Size > 1 {
		cp = fmt.Sprintf(" × CP %d (%s)", cfg.CP.Size, strings.TrimPrefix(cfg.CP.Describe(), fmt.Sprintf("CP %d, ", cfg.CP.Size)))
	}
	r.Printf("layout: %d rank(s) = TP %d%s × PP %d × DP %d; %v; %d micro-batch(es) of %d per DP rank; global batch %d (%s tokens)\n",
		cfg.World, cfg.TP, cp, cfg.PP, cfg.DP, cfg.Schedule(), cfg.Microbatches, cfg.MicroBatchSize, cfg.GlobalBatchSize,
		report.Thousands(float64(cfg.GlobalBatchSize*cfg.SeqLength)))
	if cfg.MoE.NumExperts > 0 {
		r.Printf("        experts: %d rank(s) = expert-TP %d × EP %d × expert-DP %d × PP %d; %s dispatcher\n", cfg.World,
			cmp.Or(cfg.MoE.ETP, cfg.TP), cfg.MoE.EP, cfg.MoE.ExpertDP(cfg.World, cfg.TP, cfg.PP), cfg.PP, cfg.MoE.Dispatcher)
	}
	r.Printf("optimizer: AdamW, lr %g → %g (%s, warmup %d), weight decay %g, clip %g\n",
		cfg.LR, cfg.MinLR, cfg.LRDecayStyle, cfg.WarmupIters(), cfg.WeightDecay, cfg.ClipGrad)
	weights := "N = L·(4C² + 2C·F) + Vp·C"
	if cfg.MoE.NumExperts > 0 { // nn.MatMulWeights: a token's active experts and the router
		weights = "N = Σ layers (4C² + 2C·F, or E·C + k·2C·F_expert + 2C·F_shared in an MoE layer) + Vp·C"
	}
	r.Printf("TFLOP/s below count model FLOPs = tokens × (6·N + 12·L·T·C) with %s weights in matrix multiplies: %.3g per iteration\n",
		weights, cfg.flopsPerIteration(m))
	r.Printf("training %d iterations; output in %s\n", cfg.TrainIters, r.Dir())
}

// finish prints the summary of the run.
func finish(r *report.Report, sum *summary, corp *trainingData) {
	if r == nil {
		return
	}
	r.Done(sum.Iterations, sum.Wall)
	if !math.IsNaN(sum.ValidLoss) {
		h, where := corp.entropy(), "below"
		if sum.ValidLoss > h {
			where = "above"
		}
		r.Printf("validation loss %.4f (perplexity %.2f): %.2f nats %s the unigram entropy of the training tokens, %.3f\n",
			sum.ValidLoss, math.Exp(sum.ValidLoss), math.Abs(h-sum.ValidLoss), where, h)
	}
	r.Files()
	r.Reference(corp.entropy(), fmt.Sprintf("unigram entropy %.2f", corp.entropy()))
}

// eval records a validation run at iteration it.
func eval(r *report.Report, it int, loss float64) {
	r.Eval(it, loss, report.Value{Label: "lm loss", Format: "%.4f", Key: "lm_loss", Tag: "lm loss validation", V: loss},
		report.Value{Label: "perplexity", Format: "%.2f", Key: "perplexity", Tag: "lm loss validation ppl", V: math.Exp(loss)})
}

// printGenerated prints the generated text after its prompt.
func printGenerated(r *report.Report, prompt, text string) {
	r.Printf("generated from the prompt %q:\n----\n%s%s\n----\n", prompt, prompt, text)
}
