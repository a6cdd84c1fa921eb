package report

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/term"

	"megago/train"
)

// Options say what a Report writes and where.
type Options struct {
	// OutDir receives metrics.jsonl, loss.png and (without TensorboardDir) tensorboard/.
	OutDir, TensorboardDir string
	// Iters is the number of iterations of the run; LogInterval the iterations per
	// progress line.
	Iters, LogInterval int
	// TokensPerIter are the tokens of one iteration, all ranks together; FLOPsPerIter its
	// model FLOPs (BENCHMARKS.md); Ranks the world size (TensorBoard's throughput is per
	// rank, as Megatron's).
	TokensPerIter int
	FLOPsPerIter  float64
	Ranks         int
	// Model names the model in the plot's title ("GPT").
	Model string
	// LossKey and LossTag name the training loss in metrics.jsonl and TensorBoard;
	// "" means "lm_loss" and "lm loss", Megatron's names.
	LossKey, LossTag string
}

// Report is what rank 0 shows and writes while training: progress lines (and a live
// bar on a terminal), metrics as JSON lines, TensorBoard scalars and the loss curve.
// Other ranks hold a nil *Report, whose methods do nothing.
type Report struct {
	o       Options
	out     io.Writer
	live    bool // out is a terminal: redraw a bar every iteration
	barUp   bool // the bar is on screen (a line without its newline)
	start   time.Time
	metrics *Metrics
	tb      *TB
	curve   Curve
	plot    string

	window   window    // since the last progress line
	moe      moeWindow // the MoE metrics since the last progress line
	consumed int64     // tokens trained on
	err      error     // the first failed write of metrics.jsonl or the event file
}

// window sums the iterations since the last progress line.
type window struct {
	iters, skips int
	loss         float64
	time         time.Duration
}

// New opens the output files under o.OutDir.
func New(out io.Writer, o Options) (*Report, error) {
	if o.LossKey == "" {
		o.LossKey = "lm_loss"
	}
	if o.LossTag == "" {
		o.LossTag = "lm loss"
	}
	r := &Report{o: o, out: out, start: time.Now(),
		curve: Curve{Title: fmt.Sprintf("megago %s: training loss (blue, smoothed) and validation loss (red)", o.Model)}}
	if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		r.live = true
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, err
	}
	var err error
	if r.metrics, err = NewMetrics(filepath.Join(o.OutDir, "metrics.jsonl")); err != nil {
		return nil, err
	}
	tbDir := o.TensorboardDir
	if tbDir == "" {
		tbDir = filepath.Join(o.OutDir, "tensorboard")
	}
	if r.tb, err = NewTB(tbDir); err != nil {
		r.metrics.Close()
		return nil, err
	}
	r.plot = filepath.Join(o.OutDir, "loss.png")
	return r, nil
}

// Printf prints a permanent line, above the live bar.
func (r *Report) Printf(format string, args ...any) {
	if r == nil {
		return
	}
	if r.barUp {
		fmt.Fprint(r.out, "\r\x1b[K")
		r.barUp = false
	}
	fmt.Fprintf(r.out, format, args...)
}

// Step records iteration it (1-based) of the run, which took dt, with its
// mixture-of-experts metrics moe (nil for a dense model). It returns the first error of
// writing metrics.jsonl or the event file (Err), so that a run stops at once when its
// metrics cannot be written (a full disk).
func (r *Report) Step(it int, res train.StepResult, dt time.Duration, moe *MoE) error {
	if r == nil {
		return nil
	}
	elapsed := time.Since(r.start)
	r.consumed += int64(r.o.TokensPerIter)
	tokS, tflops := float64(r.o.TokensPerIter)/dt.Seconds(), r.o.FLOPsPerIter/dt.Seconds()/1e12
	rec := Record{{"kind", "train"}, {"iteration", it}, {r.o.LossKey, res.Loss}, {"lr", res.LR},
		{"grad_norm", res.GradNorm}, {"loss_scale", res.LossScale}}
	if res.Skipped {
		rec = append(rec, Field{"skipped", true})
	}
	if moe != nil {
		rec = append(rec, moe.record()...)
	}
	r.keep(r.metrics.Path(), r.metrics.Write(append(rec, Field{"tokens", r.consumed}, Field{"tokens_per_s", tokS},
		Field{"model_tflops", tflops}, Field{"iteration_s", dt.Seconds()}, Field{"elapsed_s", elapsed.Seconds()})))
	// Megatron's TensorBoard names; throughput is model TFLOP/s per rank, as Megatron's.
	scalars := []Field{{r.o.LossTag, res.Loss}, {"learning-rate", res.LR}, {"grad-norm", res.GradNorm},
		{"loss-scale", res.LossScale}, {"throughput", tflops / float64(r.o.Ranks)}}
	if moe != nil {
		scalars = append(scalars, moe.scalars()...)
	}
	for _, s := range scalars {
		r.keep(r.tb.Path(), r.tb.Scalar(s.Key, it, s.Value.(float64)))
	}
	r.moe.add(moe)
	r.curve.TrainIter = append(r.curve.TrainIter, it)
	r.curve.Train = append(r.curve.Train, res.Loss)

	w := &r.window
	w.iters++
	w.loss += res.Loss
	w.time += dt
	if res.Skipped {
		w.skips++
	}
	eta := time.Duration(float64(w.time) / float64(w.iters) * float64(r.o.Iters-it))
	if it%r.o.LogInterval == 0 || it == r.o.Iters {
		skipped := ""
		if w.skips > 0 {
			skipped = fmt.Sprintf(" | %d skipped (loss scale %g)", w.skips, res.LossScale)
		}
		moeLine, moeLayers := r.moe.mean().progress()
		r.Printf("iter %*d/%d | loss %.4f | lr %.3e | grad norm %.3f%s | %s tok/s | %.4f TFLOP/s | elapsed %s | ETA %s%s\n%s",
			len(fmt.Sprint(r.o.Iters)), it, r.o.Iters, w.loss/float64(w.iters), res.LR, res.GradNorm, moeLine,
			Thousands(float64(r.o.TokensPerIter*w.iters)/w.time.Seconds()), r.o.FLOPsPerIter*float64(w.iters)/w.time.Seconds()/1e12,
			Clock(elapsed), Clock(eta), skipped, moeLayers)
		*w = window{}
	}
	if r.live && it < r.o.Iters {
		r.bar(it, res.Loss, tokS, eta)
	}
	r.flush()
	return r.err
}

// Err returns the first error of writing metrics.jsonl or the event file, nil if none.
func (r *Report) Err() error {
	if r == nil {
		return nil
	}
	return r.err
}

// keep records err, the result of writing the file at path, if it is the first error.
func (r *Report) keep(path string, err error) {
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("writing %s: %w", path, err)
	}
}

// flush writes the buffered records to their files.
func (r *Report) flush() {
	r.keep(r.metrics.Path(), r.metrics.Flush())
	r.keep(r.tb.Path(), r.tb.Flush())
}

// bar redraws the live progress bar.
func (r *Report) bar(it int, loss, tokS float64, eta time.Duration) {
	const width = 30
	n := width * it / r.o.Iters
	fmt.Fprintf(r.out, "\r\x1b[K[%s%s] %d/%d loss %.3f %s tok/s ETA %s",
		strings.Repeat("=", n), strings.Repeat(" ", width-n), it, r.o.Iters, loss, Thousands(tokS), Clock(eta))
	r.barUp = true
}

// Value is one number of a validation run.
type Value struct {
	Label  string // in the progress line: "lm loss"
	Format string // of the value in the progress line: "%.4f"
	Key    string // in metrics.jsonl: "lm_loss"
	Tag    string // TensorBoard's tag: "lm loss validation"; "" for none
	V      float64
}

// Eval records a validation run at iteration it: a line "validation at iteration it |
// label value | ...", a "valid" record, a TensorBoard scalar per tagged value, and
// plotted, a point of the validation curve. A failed write is kept for Err.
func (r *Report) Eval(it int, plotted float64, vs ...Value) {
	if r == nil {
		return
	}
	line := fmt.Sprintf("validation at iteration %d", it)
	rec := Record{{"kind", "valid"}, {"iteration", it}}
	for _, v := range vs {
		line += fmt.Sprintf(" | %s "+v.Format, v.Label, v.V)
		rec = append(rec, Field{v.Key, v.V})
		if v.Tag != "" {
			r.keep(r.tb.Path(), r.tb.Scalar(v.Tag, it, v.V))
		}
	}
	r.Printf("%s\n", line)
	r.keep(r.metrics.Path(), r.metrics.Write(rec))
	r.flush()
	r.curve.ValidIter = append(r.curve.ValidIter, it)
	r.curve.Valid = append(r.curve.Valid, plotted)
}

// Reference draws a dashed line at v on the loss plot, written label.
func (r *Report) Reference(v float64, label string) {
	if r == nil {
		return
	}
	r.curve.Reference, r.curve.ReferenceLabel = v, label
}

// Consumed returns the tokens trained on so far.
func (r *Report) Consumed() int64 {
	if r == nil {
		return 0
	}
	return r.consumed
}

// Done prints the line that ends a run of iterations in wall time.
func (r *Report) Done(iterations int, wall time.Duration) {
	if r == nil {
		return
	}
	tokS := float64(r.consumed) / wall.Seconds()
	r.Printf("done: %d iterations in %s (%s tokens, %s tok/s overall)\n", iterations, Clock(wall),
		Thousands(float64(r.consumed)), Thousands(tokS))
}

// Files prints where the metrics, the TensorBoard files and the loss curve are.
func (r *Report) Files() {
	if r == nil {
		return
	}
	r.Printf("metrics: %s, TensorBoard: %s, loss curve: %s\n", r.metrics.Path(), filepath.Dir(r.tb.Path()), r.plot)
}

// Dir returns the directory of the output files ("" on a nil Report).
func (r *Report) Dir() string {
	if r == nil {
		return ""
	}
	return filepath.Dir(r.plot)
}

// Close writes the plot and closes the files.
func (r *Report) Close() error {
	if r == nil {
		return nil
	}
	r.Printf("")
	err := r.curve.WritePNG(r.plot)
	for _, c := range []interface{ Close() error }{r.metrics, r.tb} {
		if e := c.Close(); err == nil {
			err = e
		}
	}
	return err
}

// Thousands formats v rounded, with thousands separators.
func Thousands(v float64) string {
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

// Clock formats d as m:ss or h:mm:ss.
func Clock(d time.Duration) string {
	s := int(d.Round(time.Second).Seconds())
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
