package train

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

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
	interleaved bool // Interleaved with V=2 (else 1F1B, or no pipelining at PP=1)
	sp          bool
	rec         nn.Recompute
	tied        bool
	clip        float64
	distributed bool // the distributed optimizer (reduce-scatter over DP)
	noOverlap   bool
	gather      bool // the distributed optimizer's parameter all-gather overlaps the next forward pass
	bf16        bool // BF16 parameters and activations (F64 otherwise)
}

func (l layout) String() string {
	s := fmt.Sprintf("tp%d-pp%d-dp%d-%s", l.tp, l.pp, l.dp, l.schedule())
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
	return s
}

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
	Loss   []float64             // per step: the mean loss (every rank agrees)
	Micro  [][]float64           // per step: DP rank 0's micro-batch losses
	Norm   []float64             // per step: the gradient norm before clipping
	Params map[string][]float64  // after training: "name@tpRank" → values (DP rank 0)
	Meta   map[string]paramShape // by name: the global shape and partition dim
}

type paramShape struct {
	Shape tensor.Shape
	Dim   int
}

func newOutcome(steps int) outcome {
	return outcome{Loss: make([]float64, steps), Micro: make([][]float64, steps), Norm: make([]float64, steps),
		Params: map[string][]float64{}, Meta: map[string]paramShape{}}
}

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
		o.Params[k] = v
	}
	for k, v := range r.Meta {
		o.Meta[k] = v
	}
}

// token is the deterministic data: token t of global sample g.
func token(g, t int) int64 { return int64((g*5 + t*3) % tinyVocab) }

// tinyBatch returns the GPTBatch of one step on the mesh: micro-batch i holds the global
// samples from step·global + SampleOffset(B, i), labels shifted by one token.
func tinyGPTBatch(dev *tensor.Device, m *parallel.Mesh, step int) GPTBatch {
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
	err := parallel.RunLocal(l.tp*l.pp*l.dp, func(world parallel.Comm) error {
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
	mesh, err := parallel.NewMesh(ctx, world, parallel.Sizes{TP: l.tp, PP: l.pp, DP: l.dp})
	if err != nil {
		return out, err
	}
	dev := tensor.NewCPU()
	dt := tensor.F64
	if l.bf16 {
		dt = tensor.BF16
	}
	b := &nn.Builder{Dev: dev, DType: dt, RNG: tensor.NewRNG(7), TP: mesh.TP(), SequenceParallel: l.sp, Recompute: l.rec}
	chunks, err := NewGPTChunks(b, tinyGPTConfig(l.tied), mesh, l.chunks())
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
			return PassFor(ctx, mesh, rng, step, micro, tinyBatch, sched.Microbatches())
		}
		res, err := tr.Step(ctx, sched, GPTForward(chunks, pass, tinyGPTBatch(dev, mesh, step)))
		if err != nil {
			return out, err
		}
		out.Loss[step], out.Norm[step] = res.Loss, res.GradNorm
		if res.Losses != nil && mesh.Coord().DP == 0 && mesh.Coord().TP == 0 {
			out.Micro[step] = res.Losses
		}
	}
	if err := tr.Optimizer().FinishParamGather(); err != nil {
		return out, err
	}
	if mesh.Coord().DP == 0 {
		for _, p := range GPTParts(chunks).Params() {
			if !p.Shared {
				out.Params[fmt.Sprintf("%s@%d", p.Name, p.TPRank)] = tensor.ToSlice[float64](p.Tensor)
				out.Meta[p.Name] = paramShape{p.GlobalShape, p.PartitionDim}
			}
		}
	}
	return out, nil
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
