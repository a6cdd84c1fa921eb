package checkpoint

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"

	"megago/nn"
	"megago/optim"
	"megago/parallel"
	"megago/tensor"
	"megago/train"
)

// A tiny GPT trained on some layout, ranks as goroutines: the harness of the resume,
// reshard and crash tests.

const (
	hVocab  = 50 // padded to 52 at TP=1, 56 at TP=2, 64 at TP=4 (VocabMultiple 4)
	hSeq    = 8  // T
	hBatch  = 2  // B, samples per micro-batch
	hGlobal = 8  // samples per step: 4 micro-batches at DP=1
	hSeed   = 5  // init and dropout seed
)

func harnessConfig(tied bool) nn.GPTConfig {
	return nn.GPTConfig{TransformerConfig: nn.TransformerConfig{NumLayers: 2, Hidden: 16, Heads: 4, FFNHidden: 32,
		Vocab: hVocab, MaxPosition: hSeq, Bias: true, Dropout: 0.1, AttnDropout: 0.1}, Untied: !tied, VocabMultiple: 4}
}

// layout is a parallel layout with the optimizer's and model's settings.
type layout struct {
	tp, pp, dp  int
	distributed bool
	dtype       tensor.DType // 0 means F64
	tied        bool
	// ep > 0 makes every layer an MoE layer of harnessMoE's experts at expert-parallel
	// size ep (expert-TP 1).
	ep int
	// cp > 1 is context parallelism: each CP rank runs its nn.CPPositions of the same
	// samples; CP ranks hold replicas of the parameters, whose gradients the DP × CP
	// group averages.
	cp int
}

// harnessMoE are the experts of an MoE layout: four, top-2, with expert biases.
var harnessMoE = nn.MoEConfig{NumExperts: 4, TopK: 2, ScoreFunction: "sigmoid", EnableExpertBias: true, GroupedGEMM: true}

func (l layout) String() string {
	s := fmt.Sprintf("tp%d-pp%d-dp%d", l.tp, l.pp, l.dp)
	if l.cp > 1 {
		s += fmt.Sprintf("-cp%d", l.cp)
	}
	if l.ep > 0 {
		s += fmt.Sprintf("-moe-ep%d", l.ep)
	}
	if l.distributed {
		s += "-distopt"
	}
	return s + "-" + l.dt().String()
}

func (l layout) dt() tensor.DType {
	if l.dtype == 0 {
		return tensor.F64
	}
	return l.dtype
}

func (l layout) schedule() parallel.Schedule {
	m := hGlobal / hBatch / l.dp
	if l.pp == 1 {
		return parallel.NoPipelining{M: m}
	}
	return parallel.OneFOneB{M: m}
}

// rig is one rank of a run: mesh, model chunk, trainer and the State to save.
type rig struct {
	l      layout
	mesh   *parallel.Mesh
	dev    *tensor.Device
	chunks []*nn.GPT
	tr     *train.Trainer
	st     *State
}

// newRig builds one rank of layout l on world: a GPT with AdamW, a warmup-cosine
// schedule with weight decay, a dynamic loss scaler (which grows every 3 steps) and
// gradient clipping, so that every kind of optimizer state matters.
func newRig(ctx context.Context, world parallel.Comm, l layout) (*rig, error) {
	sizes := parallel.Sizes{TP: l.tp, CP: l.cp, PP: l.pp, DP: l.dp}
	cfg := harnessConfig(l.tied)
	if l.ep > 0 {
		sizes.EP, sizes.ETP, cfg.MoE = l.ep, 1, harnessMoE
	}
	mesh, err := parallel.NewMesh(ctx, world, sizes)
	if err != nil {
		return nil, err
	}
	r := &rig{l: l, mesh: mesh, dev: tensor.NewCPU()}
	b := &nn.Builder{Dev: r.dev, DType: l.dt(), RNG: tensor.NewRNG(hSeed).Named("init"), TP: mesh.TP(), Experts: nn.MeshExperts(mesh)}
	if l.cp > 1 {
		cfg.CP, b.CP = l.cp, mesh.CP()
	}
	if r.chunks, err = train.NewGPTChunks(b, cfg, mesh, 1); err != nil {
		return nil, err
	}
	sched, err := optim.NewSchedule(optim.ScheduleConfig{InitLR: 1e-3, MaxLR: 1e-2, MinLR: 1e-3, WarmupSteps: 3,
		DecaySteps: 40, Decay: optim.DecayCosine, StartWD: 0.01, EndWD: 0.01})
	if err != nil {
		return nil, err
	}
	scaler, err := optim.NewDynamicScaler(optim.DynamicScalerConfig{InitialScale: 1024, GrowthInterval: 3})
	if err != nil {
		return nil, err
	}
	parts := train.GPTParts(r.chunks)
	r.tr, err = train.New(ctx, mesh, r.dev, parts, train.Config{Optim: optim.Config{Schedule: sched, Scaler: scaler,
		ClipGrad: 1, Distributed: l.distributed, BucketSize: 1000}})
	if err != nil {
		return nil, err
	}
	r.st = &State{Model: GPTModel(cfg), Params: parts.Params(), Tensors: nn.ModuleState(parts.Modules...),
		Optimizer: r.tr.Optimizer(), Seed: hSeed}
	return r, nil
}

// token is the data: token t of global sample g.
func token(g, t int) int64 { return int64((g*7 + t*3 + g*t) % hVocab) }

// batch returns the GPTBatch of iteration it: micro-batch i of this DP rank holds the
// global samples from it·hGlobal + SampleOffset(B, i).
func (r *rig) batch(it int) train.GPTBatch {
	return func(micro int) (ids, labels *tensor.Tensor) {
		g0 := it*hGlobal + r.mesh.SampleOffset(hBatch, micro)
		x, y := make([]int64, hBatch*hSeq), make([]int64, hBatch*hSeq)
		for b := range hBatch {
			for t := range hSeq {
				x[b*hSeq+t], y[b*hSeq+t] = token(g0+b, t), token(g0+b, t+1)
			}
		}
		ids, labels = tensor.FromSlice(r.dev, x, hBatch, hSeq), tensor.FromSlice(r.dev, y, hBatch, hSeq)
		if cp := r.mesh.CP(); cp.Size() > 1 {
			ids, labels = nn.CPSlice(ids, cp.Size(), cp.Rank()), nn.CPSlice(labels, cp.Size(), cp.Rank())
		}
		return ids, labels
	}
}

// step trains iteration it (dropout keyed by it) and advances the State's position.
func (r *rig) step(ctx context.Context, it int) (train.StepResult, error) {
	s := r.l.schedule()
	rng := tensor.NewRNG(r.st.Seed).Named("dropout")
	pass := func(micro int) *nn.Pass { return train.PassFor(ctx, r.mesh, rng, it, micro, hBatch, s.Microbatches()) }
	res, err := r.tr.Step(ctx, s, train.GPTForward(r.chunks, pass, r.batch(it)))
	if err != nil {
		return res, fmt.Errorf("%v iteration %d: %w", r.l, it, err)
	}
	r.st.Iteration, r.st.ConsumedSamples = it+1, (it+1)*hGlobal
	return res, nil
}

// logits returns the logits [B, T, V] (vocabulary padding removed) of an evaluation pass
// over the first micro-batch of iteration 1000 on the last stage's TP rank 0 (nil
// elsewhere), passing the hidden states between stages by hand.
func (r *rig) logits(ctx context.Context) ([]float64, error) {
	ids, _ := r.batch(1000)(0)
	p := nn.Eval(ctx)
	in := ids
	pp := r.mesh.PP()
	if !r.mesh.IsFirstStage() {
		in = tensor.Empty(r.dev, r.l.dt(), hBatch, hSeq, 16)
		if err := pp.Recv(ctx, in, pp.Rank()-1); err != nil {
			return nil, err
		}
	}
	out := r.chunks[0].Forward(p, in, nil).Detach()
	if !r.mesh.IsLastStage() {
		return nil, pp.Send(ctx, out, pp.Rank()+1)
	}
	full := parallel.GatherFromTP(ctx, r.mesh.TP(), out) // [B, T, Vp]
	if r.mesh.Coord().TP != 0 || r.mesh.Coord().DP != 0 {
		return nil, nil
	}
	return tensor.ToSlice[float64](full.Narrow(-1, 0, hVocab)), nil
}

// params returns the global values of this rank's parameters (DP rank 0, expert-DP rank
// 0 for expert parameters, not Shared) and state tensors (DP rank 0), scattered into
// whole tensors of vocabulary rows cut to V.
func (r *rig) params(into map[string][]float64, mu *sync.Mutex) {
	mu.Lock()
	defer mu.Unlock()
	dp, edp := r.mesh.Coord().DP == 0, r.mesh.ExpertCoord().EDP == 0
	for _, p := range r.st.Params {
		if !p.Shared && (p.Expert && edp || !p.Expert && dp) {
			scatter(into, p.Name, p.Region(), [2]int{0, p.Numel()}, tensorF64(p.Tensor))
		}
	}
	for _, t := range r.st.Tensors {
		if dp {
			scatter(into, t.Name, tensor.Whole(t.Tensor.Shape()...), [2]int{0, t.Tensor.Numel()}, tensorF64(t.Tensor))
		}
	}
}

// masters returns the global values of the optimizer's master weights (fp32_param) held
// by this rank, as params does for the parameters.
func (r *rig) masters(into map[string][]float64, mu *sync.Mutex) {
	mu.Lock()
	defer mu.Unlock()
	for _, st := range r.tr.Optimizer().StateDict().Tensors {
		kind, name, _ := optimKind(st.Name)
		if kind != "fp32_param" {
			continue
		}
		scatter(into, name, st.Region, st.Flat, tensorF64(st.Tensor))
	}
}

// scatter copies vals, the flat range of region reg of global tensor name, into into
// (vocabulary rows cut to V).
func scatter(into map[string][]float64, name string, reg tensor.Region, flat [2]int, vals []float64) {
	full := reg.Full.Clone()
	if name == "embedding.word.weight" || name == "output.weight" {
		full[0] = hVocab
	}
	g, ok := into[name]
	if !ok {
		g = make([]float64, full.Numel())
		into[name] = g
	}
	reg.Full = full
	for _, rn := range runs(reg, flat) {
		if n := min(rn.n, len(g)-rn.g); n > 0 {
			copy(g[rn.g:rn.g+n], vals[rn.l:rn.l+n])
		}
	}
}

// runLayout runs fn on every rank of layout l with a fresh rig (a new "process").
func runLayout(t *testing.T, l layout, fn func(ctx context.Context, r *rig) error) {
	t.Helper()
	if err := tryLayout(l, fn); err != nil {
		t.Fatalf("%v: %v", l, err)
	}
}

// tryLayout is runLayout returning the ranks' errors.
func tryLayout(l layout, fn func(ctx context.Context, r *rig) error) error {
	return parallel.RunLocal(l.tp*max(l.cp, 1)*l.pp*l.dp, func(world parallel.Comm) error {
		ctx := context.Background()
		r, err := newRig(ctx, world, l)
		if err != nil {
			return err
		}
		return fn(ctx, r)
	})
}

// maxRelDiff returns the largest |a−b| / max(|b|, 1e-3) over a and b.
func maxRelDiff(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(a[i]-b[i])/max(math.Abs(b[i]), 1e-3))
	}
	return d
}

// tensorF64 returns t's values as float64s.
func tensorF64(t *tensor.Tensor) []float64 { return tensor.ToSlice[float64](t) }
