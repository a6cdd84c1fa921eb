package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/term"

	"megago/nn"
	"megago/train"
)

// report is what rank 0 shows and writes while training: progress lines (and a live
// bar on a terminal), metrics as JSON lines, TensorBoard scalars and the loss curve.
// Other ranks hold a nil *report, whose methods do nothing.
type report struct {
	out     io.Writer
	live    bool // out is a terminal: redraw a bar every iteration
	barUp   bool // the bar is on screen (a line without its newline)
	iters   int
	tokens  int     // per iteration, all ranks
	flops   float64 // model FLOPs per iteration (BENCHMARKS.md)
	ranks   int
	start   time.Time
	metrics *metricsWriter
	tb      *tbWriter
	curve   lossCurve
	plot    string

	logInterval int
	window      window // since the last progress line
	consumed    int64  // tokens trained on
}

// window sums the iterations since the last progress line.
type window struct {
	iters, skips int
	loss         float64
	time         time.Duration
}

// newReport opens the output files under cfg.OutDir; tokens and flops are per
// iteration.
func newReport(out io.Writer, cfg *config, tokens int, flops float64) (*report, error) {
	r := &report{out: out, iters: cfg.TrainIters, tokens: tokens, flops: flops, ranks: cfg.world, start: time.Now(),
		logInterval: cfg.LogInterval}
	if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		r.live = true
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return nil, err
	}
	var err error
	if r.metrics, err = newMetricsWriter(filepath.Join(cfg.OutDir, "metrics.jsonl")); err != nil {
		return nil, err
	}
	tbDir := cfg.TensorboardDir
	if tbDir == "" {
		tbDir = filepath.Join(cfg.OutDir, "tensorboard")
	}
	if r.tb, err = newTBWriter(tbDir); err != nil {
		r.metrics.Close()
		return nil, err
	}
	r.plot = filepath.Join(cfg.OutDir, "loss.png")
	return r, nil
}

// printf prints a permanent line, above the live bar.
func (r *report) printf(format string, args ...any) {
	if r == nil {
		return
	}
	if r.barUp {
		fmt.Fprint(r.out, "\r\x1b[K")
		r.barUp = false
	}
	fmt.Fprintf(r.out, format, args...)
}

// step records iteration it (1-based) of the run, which took dt.
func (r *report) step(it int, res train.StepResult, dt time.Duration) {
	if r == nil {
		return
	}
	elapsed := time.Since(r.start)
	r.consumed += int64(r.tokens)
	tokS, tflops := float64(r.tokens)/dt.Seconds(), r.flops/dt.Seconds()/1e12
	r.metrics.Write(trainRecord{Kind: "train", Iteration: it, Loss: res.Loss, LR: res.LR, GradNorm: finite(res.GradNorm),
		LossScale: res.LossScale, Skipped: res.Skipped, Tokens: r.consumed, TokensPerS: tokS, TFLOPs: tflops,
		IterSeconds: dt.Seconds(), ElapsedS: elapsed.Seconds()})
	// Megatron's TensorBoard names; throughput is model TFLOP/s per rank, as Megatron's.
	for _, s := range []struct {
		tag string
		v   float64
	}{{"lm loss", res.Loss}, {"learning-rate", res.LR}, {"grad-norm", res.GradNorm},
		{"loss-scale", res.LossScale}, {"throughput", tflops / float64(r.ranks)}} {
		r.tb.Scalar(s.tag, it, s.v)
	}
	r.curve.trainIter = append(r.curve.trainIter, it)
	r.curve.train = append(r.curve.train, res.Loss)

	w := &r.window
	w.iters++
	w.loss += res.Loss
	w.time += dt
	if res.Skipped {
		w.skips++
	}
	eta := time.Duration(float64(w.time) / float64(w.iters) * float64(r.iters-it))
	if it%r.logInterval == 0 || it == r.iters {
		skipped := ""
		if w.skips > 0 {
			skipped = fmt.Sprintf(" | %d skipped (loss scale %g)", w.skips, res.LossScale)
		}
		r.printf("iter %*d/%d | loss %.4f | lr %.3e | grad norm %.3f | %s tok/s | %.4f TFLOP/s | elapsed %s | ETA %s%s\n",
			len(fmt.Sprint(r.iters)), it, r.iters, w.loss/float64(w.iters), res.LR, res.GradNorm,
			thousands(float64(r.tokens*w.iters)/w.time.Seconds()), r.flops*float64(w.iters)/w.time.Seconds()/1e12,
			clock(elapsed), clock(eta), skipped)
		*w = window{}
		r.metrics.Flush()
		r.tb.Flush()
	}
	if r.live && it < r.iters {
		r.bar(it, res.Loss, tokS, eta)
	}
}

// bar redraws the live progress bar.
func (r *report) bar(it int, loss, tokS float64, eta time.Duration) {
	const width = 30
	n := width * it / r.iters
	fmt.Fprintf(r.out, "\r\x1b[K[%s%s] %d/%d loss %.3f %s tok/s ETA %s",
		strings.Repeat("=", n), strings.Repeat(" ", width-n), it, r.iters, loss, thousands(tokS), clock(eta))
	r.barUp = true
}

// eval records a validation run at iteration it.
func (r *report) eval(it int, loss float64) {
	if r == nil {
		return
	}
	ppl := math.Exp(loss)
	r.printf("validation at iteration %d | lm loss %.4f | perplexity %.2f\n", it, loss, ppl)
	r.metrics.Write(validRecord{Kind: "valid", Iteration: it, Loss: loss, Perplexity: ppl})
	r.tb.Scalar("lm loss validation", it, loss)
	r.tb.Scalar("lm loss validation ppl", it, ppl)
	r.curve.validIter = append(r.curve.validIter, it)
	r.curve.valid = append(r.curve.valid, loss)
}

// close writes the plot and closes the files.
func (r *report) close() error {
	if r == nil {
		return nil
	}
	r.printf("")
	err := r.curve.writePNG(r.plot)
	for _, c := range []interface{ Close() error }{r.metrics, r.tb} {
		if e := c.Close(); err == nil {
			err = e
		}
	}
	return err
}

// thousands formats v rounded, with thousands separators.
func thousands(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Sprint(v)
	}
	s := fmt.Sprintf("%d", int64(math.Round(v)))
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// clock formats d as m:ss or h:mm:ss.
func clock(d time.Duration) string {
	s := int(d.Round(time.Second).Seconds())
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

// header prints what is about to run.
func (r *report) header(cfg *config, corp *corpus, m nn.GPTConfig, params int64) {
	if r == nil {
		return
	}
	tc := m.TransformerConfig.Defaults()
	vp := nn.PaddedVocab(tc.Vocab, m.VocabMultiple, cfg.TP)
	r.printf("data: %s\n", corp.about)
	r.printf("      training split: %s tokens; their unigram entropy is %.3f nats (the loss of a model that ignores context)\n",
		thousands(float64(corp.trainTokens)), corp.entropy())
	r.printf("model: GPT, %d layers, hidden %d, %d heads, seq %d, vocab %d (padded to %d): %s parameters, %s\n",
		tc.NumLayers, tc.Hidden, tc.Heads, cfg.SeqLength, tc.Vocab, vp, thousands(float64(params)), cfg.dtype())
	r.printf("layout: %d rank(s) = TP %d × PP %d × DP %d; %v; %d micro-batch(es) of %d per DP rank; global batch %d (%s tokens)\n",
		cfg.world, cfg.TP, cfg.PP, cfg.dp, cfg.schedule(), cfg.microbatches, cfg.MicroBatchSize, cfg.GlobalBatchSize,
		thousands(float64(r.tokens)))
	r.printf("optimizer: AdamW, lr %g → %g (%s, warmup %d), weight decay %g, clip %g\n",
		cfg.LR, cfg.MinLR, cfg.LRDecayStyle, cfg.warmupIters(), cfg.WeightDecay, cfg.ClipGrad)
	r.printf("TFLOP/s below count model FLOPs = tokens × (6·N + 12·L·T·C) with N = L·(4C² + 2C·F) + Vp·C weights in matrix multiplies: %.3g per iteration\n",
		r.flops)
	r.printf("training %d iterations; output in %s\n", cfg.TrainIters, filepath.Dir(r.plot))
}

// finish prints the summary of the run.
func (r *report) finish(sum *summary, corp *corpus) {
	if r == nil {
		return
	}
	tokS := float64(r.consumed) / sum.Wall.Seconds()
	r.printf("done: %d iterations in %s (%s tokens, %s tok/s overall)\n", sum.Iterations, clock(sum.Wall),
		thousands(float64(r.consumed)), thousands(tokS))
	if !math.IsNaN(sum.ValidLoss) {
		h, where := corp.entropy(), "below"
		if sum.ValidLoss > h {
			where = "above"
		}
		r.printf("validation loss %.4f (perplexity %.2f): %.2f nats %s the unigram entropy of the training tokens, %.3f\n",
			sum.ValidLoss, math.Exp(sum.ValidLoss), math.Abs(h-sum.ValidLoss), where, h)
	}
	r.printf("metrics: %s, TensorBoard: %s, loss curve: %s\n", r.metrics.f.Name(), filepath.Dir(r.tb.Path()), r.plot)
	r.curve.entropy = corp.entropy()
}

// generated prints the generated text after its prompt.
func (r *report) generated(prompt, text string) {
	if r == nil {
		return
	}
	r.printf("generated from the prompt %q:\n----\n%s%s\n----\n", prompt, prompt, text)
}
