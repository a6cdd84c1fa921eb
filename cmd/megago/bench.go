package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"time"

	"megago"
	"megago/internal/device"
	"megago/internal/listargs"
	"megago/internal/modelflags"
	"megago/internal/procmem"
	"megago/nn"
	"megago/optim"
	"megago/parallel"
	"megago/tensor"
)

func init() {
	register(command{
		name:    "bench",
		summary: "time training steps of a GPT (the peer of bench/torch_gpt.py)",
		usage: `megago bench gpt [flags]
       megago bench engine [flags]   (the serving engine; megago bench engine -h)
       megago bench serve --url URL  (a running megago serve over HTTP; megago bench serve -h)

Bench gpt times full training steps (zero grad, forward, cross entropy,
backward, AdamW update) of a GPT-2 style model on random tokens, on one rank,
and prints one JSON line with the same fields as PyTorch's bench/torch_gpt.py
(ms_step_median, ms_fwd_median, ms_bwd_median, ms_update_median, tokens_per_s,
model_gflop_per_step, gflops, ...) plus peak_rss_mb, so the two can be run
back to back and divided. Progress goes to stderr.

--device cuda runs on a GPU (package cuda), --bf16 in bf16 with fp32 master
weights and optimizer state; each phase is timed after the device has
finished it.

The model: pre-LayerNorm blocks, tanh GeLU MLP of 4C, learned positions,
causal attention, final LayerNorm, output layer tied to the word embedding, the
vocabulary padded to a multiple of --pad-vocab; AdamW (β 0.9/0.999, ε 1e-8)
over fp32 flat buffers, without gradient clipping, gradient norm or inf/nan
check (as torch_gpt.py's torch.optim.AdamW; optim.Config.SkipGradNorm). Model
FLOPs per step are tokens × (6·N + 12·L·T·C) with N = 12·L·C² + Vp·C
(BENCHMARKS.md); gflops is that divided by the median step time.

Megatron's architecture flags make it Llama-style (N then counts the MLP as
2C·F, not SwiGLU's 3C·F, nor grouped-query attention's smaller K and V), and
its mixture-of-experts flags give it experts (on one rank: EP and expert-TP 1):

  megago bench gpt --layers 4 --dim 256 --heads 4 --vocab 8192 --seq 256 --batch 8 \
    --num-experts 8 --moe-ffn-hidden-size 512 --moe-router-topk 2 --moe-grouped-gemm

or Llama-style:

  megago bench gpt --layers 4 --dim 256 --heads 8 --vocab 8192 --seq 256 --batch 8 \
    --normalization RMSNorm --norm-epsilon 1e-6 --swiglu --position-embedding-type rope \
    --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights \
    --disable-bias-linear

Megatron's context-parallel flags (--context-parallel-size, --cp-comm-type,
--hierarchical-context-parallel-sizes) split each sequence over CP goroutine
ranks of this one process (the in-process transport; each rank its own device,
the random tokens cut into its 2 load-balanced chunks, gradients averaged over
the CP group by the optimizer). The JSON line is then rank 0's, with "system"
ending in -cpN: the ms are per training step of the whole CP group (every rank
steps together), tokens_per_step and the FLOPs count the group's tokens, and
peak_rss_mb is the whole process's, all CP ranks together:

  megago bench gpt --layers 2 --dim 64 --heads 4 --vocab 8192 --seq 4096 --batch 1 \
    --context-parallel-size 4 --cp-comm-type p2p

The workloads of BENCHMARKS.md:

  megago bench gpt --layers 4 --dim 256 --heads 4 --vocab 8192 --seq 256 --batch 8 --steps 20   # W2
  megago bench gpt --layers 12 --dim 768 --heads 12 --vocab 50257 --block 1024 --seq 64 --batch 4 --steps 10   # W1

bench/compare.py runs them beside PyTorch and prints the ratios.`,
		run: runBench,
	})
}

// benchConfig holds the flags of megago bench gpt, named as bench/torch_gpt.py names
// them.
type benchConfig struct {
	Layers, Dim, Heads, Vocab, Seq, Batch int
	Steps, Warmup, Block, PadVocab        int
	Threads                               int
	LR, WD                                float64
	Seed                                  uint64
	CPUProfile                            string // a pprof CPU profile of the timed steps
	Trace                                 string // a runtime/trace execution trace of the timed steps
	Device                                string // a registered tensor backend: cpu, cuda
	BF16                                  bool   // bf16 weights and activations, fp32 masters
	Unfused                               bool   // nn.Builder.Unfused: the reference compositions
	// Megatron's architecture flags (a Llama-style GPT: --normalization RMSNorm --swiglu
	// --position-embedding-type rope ...), with --ffn-hidden-size, --init-method-std and
	// --untie-embeddings-and-output-weights.
	Arch    modelflags.Arch
	MoE     modelflags.MoE // Megatron's mixture-of-experts flags (--num-experts, --moe-router-topk, ...), on one rank
	CP      modelflags.CP  // Megatron's context-parallel flags: CP goroutine ranks (bench_cp.go)
	FFN     int
	InitStd float64
	Untied  bool
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	workload := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		workload, args = args[0], args[1:]
	}
	switch workload {
	case "engine":
		return runBenchEngine(ctx, args, stdout, stderr)
	case "serve":
		return runBenchServe(ctx, args, stdout)
	}
	var c benchConfig
	fs.IntVar(&c.Layers, "layers", 12, "transformer layers L")
	fs.IntVar(&c.Dim, "dim", 768, "hidden size C")
	fs.IntVar(&c.Heads, "heads", 12, "attention heads")
	fs.IntVar(&c.Vocab, "vocab", 50257, "vocabulary size V")
	fs.IntVar(&c.Seq, "seq", 64, "sequence length T")
	fs.IntVar(&c.Batch, "batch", 4, "batch size B")
	fs.IntVar(&c.Steps, "steps", 10, "timed steps (the median is reported)")
	fs.IntVar(&c.Warmup, "warmup", 2, "untimed warm-up steps")
	fs.IntVar(&c.Block, "block", 0, "position table size; 0 means --seq")
	fs.IntVar(&c.PadVocab, "pad-vocab", 128, "pad the vocabulary to a multiple of this; 1 means no padding")
	fs.IntVar(&c.Threads, "threads", 2, "threads (GOMAXPROCS); 0 keeps Go's default")
	fs.Float64Var(&c.LR, "lr", 1e-4, "AdamW learning rate")
	fs.Float64Var(&c.WD, "wd", 0, "AdamW weight decay")
	fs.Uint64Var(&c.Seed, "seed", 1337, "seed of the weights and the random tokens")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a pprof CPU profile of the timed steps to this file (samples labelled phase=forward|backward|update)")
	fs.StringVar(&c.Trace, "trace", "", "write a runtime/trace execution trace of the timed steps to this file (go tool trace)")
	fs.StringVar(&c.Device, "device", "cpu", "tensor backend to run on: cpu or cuda")
	fs.BoolVar(&c.BF16, "bf16", false, "bf16 weights, activations and gradients with fp32 master weights and optimizer state")
	fs.BoolVar(&c.Unfused, "unfused", false, "build the model with the unfused reference compositions of the fused ops (attention through the whole [B, NH, T, T] score matrix), to compare")
	c.Arch = modelflags.Defaults()
	c.Arch.Register(fs)
	c.MoE = modelflags.MoEDefaults()
	c.MoE.Register(fs)
	c.CP = modelflags.CPDefaults()
	c.CP.Register(fs)
	fs.IntVar(&c.FFN, "ffn-hidden-size", 0, "MLP hidden size (0: 4 × dim, or Megatron's ⌊(8/3·dim)/64⌋·64 with --swiglu)")
	fs.Float64Var(&c.InitStd, "init-method-std", 0.02, "std of the weight initialization")
	fs.BoolVar(&c.Untied, "untie-embeddings-and-output-weights", false, "give the output layer its own weight")
	if err := parseFlags(fs, listargs.Join(args, modelflags.CPListFlags...), stdout); err != nil {
		return err
	}
	if workload != "gpt" {
		return &usageError{fmt.Errorf("want the workload gpt (megago bench gpt --layers 4 ...), not %q", workload)}
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return &usageError{err}
	}
	if c.Threads > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(c.Threads))
	}
	res, err := benchGPT(ctx, c, stderr)
	if err != nil {
		return err
	}
	line, err := json.Marshal(res)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", line)
	return err
}

func (c benchConfig) validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"layers", c.Layers}, {"dim", c.Dim}, {"heads", c.Heads}, {"vocab", c.Vocab}, {"seq", c.Seq},
		{"batch", c.Batch}, {"steps", c.Steps}, {"pad-vocab", c.PadVocab}} {
		if f.v < 1 {
			return fmt.Errorf("gpt: --%s %d must be at least 1", f.name, f.v)
		}
	}
	switch {
	case c.Warmup < 0:
		return fmt.Errorf("gpt: --warmup %d must not be negative", c.Warmup)
	case c.Dim%c.Heads != 0 && c.Arch.KVChannels == 0:
		return fmt.Errorf("gpt: --dim %d not divisible by --heads %d", c.Dim, c.Heads)
	case c.Block != 0 && c.Block < c.Seq:
		return fmt.Errorf("gpt: --block %d shorter than --seq %d", c.Block, c.Seq)
	case !(c.LR > 0):
		return fmt.Errorf("gpt: --lr %v must be positive", c.LR)
	case c.FFN < 0 || !(c.InitStd > 0):
		return fmt.Errorf("gpt: --ffn-hidden-size %d must not be negative and --init-method-std %v must be positive", c.FFN, c.InitStd)
	}
	errs := c.Arch.Check(c.Heads, 1)
	ffn := cmp.Or(c.model().FFNHidden, 4*c.Dim)
	errs = append(errs, c.MoE.Check(c.Layers, ffn)...)
	if c.MoE.EP > 1 || c.MoE.ETP > 1 {
		errs = append(errs, fmt.Sprintf("--expert-model-parallel-size %d, --expert-tensor-parallel-size %d: bench gpt runs on one rank (both 1)", c.MoE.EP, c.MoE.ETP))
	}
	errs = append(errs, c.CP.Check(c.model().TransformerConfig, 1, c.Seq, false)...)
	if len(errs) > 0 {
		return fmt.Errorf("gpt: %s", strings.Join(errs, "; "))
	}
	if err := c.model().Validate(); err != nil {
		return fmt.Errorf("gpt: %w", err)
	}
	return nil
}

// model returns the GPT the flags describe: GPT-2 unless the architecture flags say
// otherwise.
func (c benchConfig) model() nn.GPTConfig {
	ffn := c.FFN
	if ffn == 0 && c.Arch.SwiGLU {
		ffn = modelflags.SwiGLUFFN(c.Dim) // as Megatron sizes it
	}
	cfg := nn.GPTConfig{TransformerConfig: nn.TransformerConfig{NumLayers: c.Layers, Hidden: c.Dim, Heads: c.Heads,
		FFNHidden: ffn, Vocab: c.Vocab, MaxPosition: cmp.Or(c.Block, c.Seq), InitStd: c.InitStd},
		Untied: c.Untied, VocabMultiple: c.PadVocab}
	c.Arch.Apply(&cfg.TransformerConfig)
	c.MoE.Apply(&cfg.TransformerConfig)
	c.CP.Apply(&cfg.TransformerConfig)
	return cfg
}

// benchResult is the JSON line of megago bench gpt: bench/torch_gpt.py's fields, with
// "system" megago-DEVICE (plus -bf16, -unfused) and the Go version in place of torch's.
type benchResult struct {
	System          string  `json:"system"`
	Megago          string  `json:"megago"`
	Go              string  `json:"go"`
	Threads         int     `json:"threads"`
	Layers          int     `json:"layers"`
	Dim             int     `json:"dim"`
	Heads           int     `json:"heads"`
	Vocab           int     `json:"vocab"`
	VocabPadded     int     `json:"vocab_padded"`
	Block           int     `json:"block"`
	Seq             int     `json:"seq"`
	Batch           int     `json:"batch"`
	TokensPerStep   int     `json:"tokens_per_step"`
	Params          int     `json:"params"`
	ParamsMatmul    int     `json:"params_matmul"`
	Steps           int     `json:"steps"`
	Warmup          int     `json:"warmup"`
	MsStepMedian    float64 `json:"ms_step_median"`
	MsStepMin       float64 `json:"ms_step_min"`
	MsStepMax       float64 `json:"ms_step_max"`
	MsFwdMedian     float64 `json:"ms_fwd_median"`
	MsBwdMedian     float64 `json:"ms_bwd_median"`
	MsUpdateMedian  float64 `json:"ms_update_median"`
	TokensPerS      float64 `json:"tokens_per_s"`
	ModelGFLOPPerSt float64 `json:"model_gflop_per_step"`
	GFLOPS          float64 `json:"gflops"`
	FirstLoss       float64 `json:"first_loss"`
	LastLoss        float64 `json:"last_loss"`
	PeakRSSMB       float64 `json:"peak_rss_mb"`
}

// benchRank builds the model on CP rank cp.Rank() of cp (parallel.Self() for one rank)
// and runs c.Warmup+c.Steps timed steps.
func benchRank(ctx context.Context, c benchConfig, cp parallel.Comm, progress io.Writer) (*benchResult, error) {
	cfg := c.model()
	block := cfg.MaxPosition
	dev, err := device.Open(c.Device) // a missing GPU said in at most three lines
	if err != nil {
		return nil, fmt.Errorf("gpt: %w", err)
	}
	dt, system := tensor.F32, "megago-"+c.Device
	if c.BF16 {
		dt, system = tensor.BF16, system+"-bf16"
	}
	if c.Unfused {
		system += "-unfused"
	}
	b := &nn.Builder{Dev: dev, DType: dt, RNG: tensor.NewRNG(c.Seed).Named("init"), TP: parallel.Self(), Unfused: c.Unfused}
	if cp.Size() > 1 {
		b.CP, system = cp, fmt.Sprintf("%s-cp%d", system, cp.Size())
	}
	model, err := nn.NewGPT(b, cfg, nn.WholeModel(c.Layers))
	if err != nil {
		return nil, err
	}
	// The gradients are averaged over the CP group, as over DP×CP in Megatron. Without
	// clipping or a loss scaler the update needs no gradient norm, and torch_gpt.py's
	// AdamW computes none.
	opt, err := optim.New(model.Params(), optim.Config{Rule: optim.AdamW{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8},
		LR: c.LR, WeightDecay: c.WD, Groups: optim.Groups{DP: cp}, SkipGradNorm: true})
	if err != nil {
		return nil, err
	}

	// Random tokens, one batch per step, drawn before timing as torch_gpt.py does.
	rng := rand.New(rand.NewPCG(c.Seed, 0))
	n := c.Warmup + c.Steps
	ids, labels := make([][]int64, n), make([][]int64, n)
	for s := range n {
		ids[s], labels[s] = make([]int64, c.Batch*c.Seq), make([]int64, c.Batch*c.Seq)
		for i := range c.Batch {
			row := make([]int64, c.Seq+1)
			for j := range row {
				row[j] = rng.Int64N(int64(c.Vocab))
			}
			copy(ids[s][i*c.Seq:], row[:c.Seq])
			copy(labels[s][i*c.Seq:], row[1:])
		}
	}

	var tot, fwd, bwd, upd []float64
	var losses []float64
	for s := range n {
		if s == c.Warmup {
			stop, err := startRecording(c.CPUProfile, c.Trace)
			if err != nil {
				return nil, err
			}
			defer stop()
		}
		scope := dev.NewScope()
		x := nn.CPSlice(tensor.FromSlice(dev, ids[s], c.Batch, c.Seq), cp.Size(), cp.Rank())    // [B, T/cp]
		y := nn.CPSlice(tensor.FromSlice(dev, labels[s], c.Batch, c.Seq), cp.Size(), cp.Rank()) // [B, T/cp]
		dev.Sync()                                                                              // time the phases by their work, not by their launches
		t0 := time.Now()
		var loss *tensor.Tensor
		phase(ctx, "forward", func(ctx context.Context) {
			opt.ZeroGrad()
			p := &nn.Pass{Ctx: ctx, Train: true, RNG: tensor.NewRNG(c.Seed).Named("dropout")}
			loss, _ = model.LossConsuming(p, model.Forward(p, x, nil), y)
			dev.Sync()
		})
		t1 := time.Now()
		phase(ctx, "backward", func(context.Context) { loss.Backward(); dev.Sync() })
		t2 := time.Now()
		var err error
		phase(ctx, "update", func(ctx context.Context) { _, err = opt.Step(ctx); dev.Sync() })
		if err != nil {
			scope.Close()
			return nil, fmt.Errorf("gpt: step %d: %w", s, err)
		}
		t3 := time.Now()
		lv := loss.Item()
		scope.Close()
		losses = append(losses, lv)
		st := dev.Stats()
		fmt.Fprintf(progress, "step %d loss %.4f total %.1f ms (fwd %.1f bwd %.1f upd %.1f) | tensors: peak %.0f MB, pool %.0f MB\n",
			s, lv, ms(t3.Sub(t0)), ms(t1.Sub(t0)), ms(t2.Sub(t1)), ms(t3.Sub(t2)), mb(st.Peak), mb(st.Reserved))
		if s >= c.Warmup {
			tot, fwd = append(tot, ms(t3.Sub(t0))), append(fwd, ms(t1.Sub(t0)))
			bwd, upd = append(bwd, ms(t2.Sub(t1))), append(upd, ms(t3.Sub(t2)))
		}
	}

	vp := model.Vp
	nmm := nn.MatMulWeights(cfg.TransformerConfig, vp)
	tokens := c.Batch * c.Seq
	flops := nn.TrainingFLOPs(cfg.TransformerConfig, vp, c.Batch, c.Seq)
	params := 0
	for _, p := range model.Params() {
		params += p.Tensor.Numel()
	}
	med := median(tot)
	return &benchResult{
		System: system, Megago: megago.Version, Go: runtime.Version(), Threads: runtime.GOMAXPROCS(0),
		Layers: c.Layers, Dim: c.Dim, Heads: c.Heads, Vocab: c.Vocab, VocabPadded: vp, Block: block,
		Seq: c.Seq, Batch: c.Batch, TokensPerStep: tokens, Params: params, ParamsMatmul: nmm,
		Steps: c.Steps, Warmup: c.Warmup,
		MsStepMedian: round2(med), MsStepMin: round2(slices.Min(tot)), MsStepMax: round2(slices.Max(tot)),
		MsFwdMedian: round2(median(fwd)), MsBwdMedian: round2(median(bwd)), MsUpdateMedian: round2(median(upd)),
		TokensPerS: round1(float64(tokens) / med * 1e3), ModelGFLOPPerSt: round3(flops / 1e9),
		GFLOPS:    round2(flops / med / 1e6),
		FirstLoss: round4(losses[0]), LastLoss: round4(losses[len(losses)-1]),
		PeakRSSMB: round1(float64(procmem.PeakRSS()) / (1 << 20)),
	}, nil
}

// phase runs f with the pprof label phase=name, which the goroutines it starts inherit, so
// that a --cpuprofile can be cut by phase (go tool pprof -tagfocus phase=backward), inside a
// trace region of that name for --trace.
func phase(ctx context.Context, name string, f func(context.Context)) {
	pprof.Do(ctx, pprof.Labels("phase", name), func(ctx context.Context) {
		trace.WithRegion(ctx, name, func() { f(ctx) })
	})
}

// startRecording starts a pprof CPU profile written to cpuPath and an execution trace
// written to tracePath (each unless its path is ""); the returned stop ends both.
func startRecording(cpuPath, tracePath string) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, f := range stops {
			f()
		}
	}
	for _, r := range []struct {
		path        string
		start       func(io.Writer) error
		stopWriting func()
	}{{cpuPath, pprof.StartCPUProfile, pprof.StopCPUProfile}, {tracePath, trace.Start, trace.Stop}} {
		if r.path == "" {
			continue
		}
		f, err := os.Create(r.path)
		if err != nil {
			stop()
			return nil, fmt.Errorf("gpt: %w", err)
		}
		if err := r.start(f); err != nil {
			f.Close()
			stop()
			return nil, fmt.Errorf("gpt: %w", err)
		}
		stops = append(stops, func() { r.stopWriting(); f.Close() })
	}
	return stop, nil
}

func mb(bytes int64) float64 { return float64(bytes) / (1 << 20) }

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// median returns the median of xs (the mean of the middle two for an even count, as
// Python's statistics.median does). It panics if xs is empty.
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// roundTo rounds x to the nearest multiple of 1/scale, so that JSON prints it short.
func roundTo(x, scale float64) float64 { return math.Round(x*scale) / scale }
func round1(x float64) float64         { return roundTo(x, 10) }
func round2(x float64) float64         { return roundTo(x, 100) }
func round3(x float64) float64         { return roundTo(x, 1000) }
func round4(x float64) float64         { return roundTo(x, 10000) }
