package train

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/internal/experttest"
	"megago/nn"
	"megago/optim"
	"megago/parallel"
	"megago/tensor"
)

// The 3-D harness: a tiny GPT trained for a few steps on one layout (TP × PP × DP ranks
// as goroutines, a schedule, sequence parallelism, recomputation), returning what every
// layout must agree on.

const (
	tinyLayers = 8  // splits over p·V = 1, 2, 4, 8
	tinyHidden = 8  // 2 heads of 4
	tinyVocab  = 32 // divisible by tp: no padding, so every layout has the same parameters
	tinySeq    = 8  // T; T/tp = 4 under SP
	tinyBatch  = 2  // B, samples per micro-batch
	tinyMicro  = 8  // micro-batches per step at DP=1 (a global batch of 16 samples)
)

func tinyGPTConfig(tied bool) nn.GPTConfig {
	return nn.GPTConfig{TransformerConfig: nn.TransformerConfig{NumLayers: tinyLayers, Hidden: tinyHidden, Heads: 2,
		Vocab: tinyVocab, MaxPosition: tinySeq, Bias: true, Dropout: 0.1, AttnDropout: 0.1}, Untied: !tied, VocabMultiple: 1}
}

// layout is one configuration of the 3-D matrix.
type layout struct {
	tp, pp, dp  int
	cp          int    // context-parallel size (0: 1)
	comm        string // CPCommType
	interleaved bool   // Interleaved with V=2 (else 1F1B, or no pipelining at PP=1)
	sp          bool
	rec         nn.Recompute
	tied        bool
	clip        float64
	distributed bool // the distributed optimizer (reduce-scatter over DP)
	noOverlap   bool
	gather      bool // the distributed optimizer's parameter all-gather overlaps the next forward pass
	bf16        bool // BF16 parameters and activations (F64 otherwise)
	ep, etp     int  // expert-parallel and expert-tensor-parallel sizes (0: 1 and tp)
	moe         moeModel
}

func (l layout) String() string {
	s := fmt.Sprintf("tp%d-pp%d-dp%d-%s", l.tp, l.pp, l.dp, l.schedule())
	if l.cp > 1 {
		s += fmt.Sprintf("-cp%d-%s", l.cp, l.comm)
	}
	if l.sp {
		s += "-sp"
	}
	if l.rec != nn.RecomputeNone {
		s += "-rec" + l.rec.String()
	}
	if l.tied {
		s += "-tied"
	}
	if l.clip > 0 {
		s += "-clip"
	}
	if l.distributed {
		s += "-distopt"
	}
	if l.noOverlap {
		s += "-nooverlap"
	}
	if l.gather {
		s += "-overlapgather"
	}
	if l.bf16 {
		s += "-bf16"
	}
	if l.moe.NumExperts > 0 {
		s += fmt.Sprintf("-ep%d-etp%d-%v", max(l.ep, 1), l.expertTP(), l.moe)
	}
	return s
}

// expertTP is the expert-tensor-parallel size (etp, or tp when 0).
func (l layout) expertTP() int {
	if l.etp == 0 {
		return l.tp
	}
	return l.etp
}

// gptConfig is the model the layout trains: the tiny GPT, or with l.moe the tiny MoE GPT.
func (l layout) gptConfig() nn.GPTConfig {
	if l.moe.NumExperts > 0 {
		return tinyMoEGPTConfig(l.moe)
	}
	c := tinyGPTConfig(l.tied)
	c.CPCommType = l.comm
	return c
}

// cpSize is the context-parallel size (cp, or 1 when 0).
func (l layout) cpSize() int { return max(l.cp, 1) }

func (l layout) chunks() int {
	if l.interleaved {
		return 2
	}
	return 1
}

func (l layout) schedule() parallel.Schedule {
	m := tinyMicro / l.dp
	switch {
	case l.interleaved:
		return parallel.Interleaved{M: m, V: 2}
	case l.pp == 1:
		return parallel.NoPipelining{M: m}
	}
	return parallel.OneFOneB{M: m}
}

// outcome is what a run produces, gathered from every rank.
type outcome struct {
	Loss  []float64   // per step: the mean loss (every rank agrees)
	Micro [][]float64 // per step: DP rank 0's micro-batch losses
	Norm  []float64   // per step: the gradient norm before clipping
	// Params are the parameters after training by shard key (shardKey), from the first
	// data-parallel replica (expert-data-parallel for expert parameters); Regions are
	// the shards' places in the global tensors.
	Params  map[string][]float64
	Regions map[string]tensor.Region
	// Grads are per step the reduced gradients by shard key (not recorded under the
	// distributed optimizer, which keeps only a shard of them).
	Grads []map[string][]float64
	// State is the modules' state after training (the routers' expert biases) by name,
	// from DP rank 0 and TP rank 0.
	State map[string][]float64
	// Dropped counts the (token, expert) pairs dropped over capacity, on all ranks.
	Dropped int
}

func newOutcome(steps int) outcome {
	o := outcome{Loss: make([]float64, steps), Micro: make([][]float64, steps), Norm: make([]float64, steps),
		Params: map[string][]float64{}, Regions: map[string]tensor.Region{}, Grads: make([]map[string][]float64, steps),
		State: map[string][]float64{}}
	for i := range o.Grads {
		o.Grads[i] = map[string][]float64{}
	}
	return o
}

// shardKey names parameter p's shard: "name@[start] tpRank" (the TP rank tells the
// copies of a TP-replicated parameter apart).
func shardKey(p *nn.Param) string { return fmt.Sprintf("%s@%v tp%d", p.Name, p.Start(), p.TPRank) }

// splitKey returns the parameter name of a shard key.
func splitKey(k string) string { return k[:strings.Index(k, "@")] }

// merge adds one rank's outcome to o.
func (o *outcome) merge(r outcome) {
	copy(o.Loss, r.Loss)
	copy(o.Norm, r.Norm)
	for i, m := range r.Micro {
		if m != nil {
			o.Micro[i] = m
		}
	}
	for k, v := range r.Params {
		o.Params[k], o.Regions[k] = v, r.Regions[k]
	}
	for i, g := range r.Grads {
		for k, v := range g {
			o.Grads[i][k] = v
		}
	}
	for k, v := range r.State {
		o.State[k] = v
	}
	o.Dropped += r.Dropped
}

// token is the deterministic data: token t of global sample g.
func token(g, t int) int64 { return int64((g*5 + t*3) % tinyVocab) }

// tinyBatch returns the GPTBatch of one step on the mesh: micro-batch i holds the global
// samples from step·global + SampleOffset(B, i), labels shifted by one token, the CP
// rank's positions of them (nn.CPSlice).
func tinyGPTBatch(dev *tensor.Device, m *parallel.Mesh, step int) GPTBatch {
	whole := wholeGPTBatch(dev, m, step)
	return func(micro int) (ids, labels *tensor.Tensor) {
		ids, labels = whole(micro)
		cp, r := m.Sizes().CP, m.Coord().CP
		return nn.CPSlice(ids, cp, r), nn.CPSlice(labels, cp, r)
	}
}

// wholeGPTBatch is tinyGPTBatch's whole sequences, [B, T] each.
func wholeGPTBatch(dev *tensor.Device, m *parallel.Mesh, step int) GPTBatch {
	return func(micro int) (ids, labels *tensor.Tensor) {
		g0 := step*tinyMicro*tinyBatch + m.SampleOffset(tinyBatch, micro)
		x, y := make([]int64, tinyBatch*tinySeq), make([]int64, tinyBatch*tinySeq)
		for b := range tinyBatch {
			for t := range tinySeq {
				x[b*tinySeq+t], y[b*tinySeq+t] = token(g0+b, t), token(g0+b, t+1)
			}
		}
		return tensor.FromSlice(dev, x, tinyBatch, tinySeq), tensor.FromSlice(dev, y, tinyBatch, tinySeq)
	}
}

// train3D trains the tiny GPT for steps steps on layout l, ranks as goroutines.
func train3D(t *testing.T, l layout, steps int) outcome {
	t.Helper()
	out := newOutcome(steps)
	var mu sync.Mutex
	err := parallel.RunLocal(l.tp*l.pp*l.dp*l.cpSize(), func(world parallel.Comm) error {
		r, err := trainRank(context.Background(), world, l, steps)
		mu.Lock()
		out.merge(r)
		mu.Unlock()
		return err
	})
	require.NoError(t, err, "%v", l)
	return out
}

// trainRank is one rank of train3D on the world Comm (in-process or TCP).
func trainRank(ctx context.Context, world parallel.Comm, l layout, steps int) (outcome, error) {
	out := newOutcome(steps)
	mesh, err := parallel.NewMesh(ctx, world, parallel.Sizes{TP: l.tp, CP: l.cp, PP: l.pp, DP: l.dp, EP: l.ep, ETP: l.etp})
	if err != nil {
		return out, err
	}
	dev := tensor.NewCPU()
	dt := tensor.F64
	if l.bf16 {
		dt = tensor.BF16
	}
	b := &nn.Builder{Dev: dev, DType: dt, RNG: tensor.NewRNG(7), TP: mesh.TP(), SequenceParallel: l.sp, Recompute: l.rec,
		Experts: nn.MeshExperts(mesh), CP: mesh.CP()}
	chunks, err := NewGPTChunks(b, l.gptConfig(), mesh, l.chunks())
	if err != nil {
		return out, err
	}
	tr, err := New(ctx, mesh, dev, GPTParts(chunks), Config{NoOverlap: l.noOverlap, Optim: optim.Config{
		LR: 1e-2, WeightDecay: 0.01, ClipGrad: l.clip, Distributed: l.distributed, BucketSize: 1500,
		OverlapParamGather: l.gather}})
	if err != nil {
		return out, err
	}
	sched, rng := l.schedule(), tensor.NewRNG(99)
	for step := range steps {
		pass := func(micro int) *nn.Pass {
			return tr.PassFor(ctx, rng, step, micro, tinyBatch, sched.Microbatches())
		}
		fwd := countDrops(l, chunks, &out.Dropped, GPTForward(chunks, pass, tinyGPTBatch(dev, mesh, step)))
		res, err := tr.Step(ctx, sched, fwd)
		if err != nil {
			return out, err
		}
		out.Loss[step], out.Norm[step] = res.Loss, res.GradNorm
		if res.Losses != nil && mesh.Coord().DP == 0 && mesh.Coord().TP == 0 {
			out.Micro[step] = res.Losses
		}
		if !l.distributed {
			record(mesh, chunks, out.Grads[step], nil, func(p *nn.Param) *tensor.Tensor { return tr.mainGrad(p) })
		}
	}
	if err := tr.Optimizer().FinishParamGather(); err != nil {
		return out, err
	}
	record(mesh, chunks, out.Params, out.Regions, func(p *nn.Param) *tensor.Tensor { return p.Tensor })
	if c := mesh.Coord(); c.DP == 0 && c.TP == 0 {
		for _, s := range nn.ModuleState(GPTParts(chunks).Modules...) {
			out.State[s.Name] = tensor.ToSlice[float64](s.Tensor)
		}
	}
	return out, nil
}

// record puts the values of(p) of every parameter of this rank's chunks that it holds
// for the first data-parallel replica (expert-data-parallel for expert parameters) into
// vals by shard key, with its region into regions if not nil.
func record(mesh *parallel.Mesh, chunks []*nn.GPT, vals map[string][]float64, regions map[string]tensor.Region,
	of func(p *nn.Param) *tensor.Tensor) {
	for _, p := range GPTParts(chunks).Params() {
		first := mesh.Coord().DP == 0
		if p.Expert {
			first = mesh.ExpertCoord().EDP == 0
		}
		if p.Shared || !first {
			continue
		}
		k := shardKey(p)
		vals[k] = tensor.ToSlice[float64](of(p))
		if regions != nil {
			regions[k] = p.Region()
		}
	}
}

// refPart returns the part of reference ref's parameter name (its values vals) that
// region r holds: r lies within one of ref's shards of the parameter (a single-rank
// reference has the whole tensor). It returns nil if no shard holds r.
func refPart(ref outcome, vals map[string][]float64, name string, r tensor.Region) []float64 {
	for k, rr := range ref.Regions {
		if splitKey(k) != name || !within(r, rr) {
			continue
		}
		rel := tensor.Region{Full: rr.Size, Start: make([]int, len(r.Start)), Size: r.Size}
		for d := range r.Start {
			rel.Start[d] = r.Start[d] - rr.Start[d]
		}
		return experttest.RegionOf(vals[k], rel)
	}
	return nil
}

// within reports whether region r lies inside region outer.
func within(r, outer tensor.Region) bool {
	for d := range r.Start {
		if r.Start[d] < outer.Start[d] || r.Start[d]+r.Size[d] > outer.Start[d]+outer.Size[d] {
			return false
		}
	}
	return true
}

// shard returns TP rank r's part of the reference (TP=1) parameter values full of global
// shape, split along dim over tp ranks (dim < 0: the whole).
func shard(full []float64, shape tensor.Shape, dim, r, tp int) []float64 {
	if dim < 0 {
		return full
	}
	outer, n, inner := shape.Split3(dim)
	part := n / tp
	var out []float64
	for o := range outer {
		out = append(out, full[(o*n+r*part)*inner:(o*n+(r+1)*part)*inner]...)
	}
	return out
}
