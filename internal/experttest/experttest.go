// Package experttest builds what tests of expert-parallel training need without a
// mixture-of-experts layer: a layout of both decompositions of a world of goroutine ranks
// (TP × DP × PP for dense parameters, expert-TP × EP × expert-DP × PP for expert ones,
// each in Megatron's rank order, the first axis fastest), its groups, a toy model of dense
// and expert parameters initialized by global coordinates, and the gradients a model
// would deliver to each rank: a dense parameter's from its DP replica's loss, an expert
// parameter's summed over the replicas whose tokens its expert-TP × EP group receives.
//
// Every sample's gradient is a multiple of 2⁻⁹ below 4 in magnitude, so sums of a few of
// them, their averages over a power-of-two number of samples or ranks and their squares
// are exact in float32 and float64: any layout must reproduce the single rank bit for
// bit.
package experttest

import (
	"context"
	"fmt"
	"math"
	"slices"

	"megago/nn/param"
	"megago/parallel"
	"megago/tensor"
)

// Layout is a parallel layout: TP × DP × PP dense ranks, and expert-TP × EP × expert-DP
// × PP expert ranks over the same world (expert-DP = world / (ETP·EP·PP)).
type Layout struct{ TP, PP, DP, ETP, EP int }

// World returns the number of ranks.
func (l Layout) World() int { return l.TP * l.DP * l.PP }

// EDP returns the expert-data-parallel size.
func (l Layout) EDP() int { return l.World() / (l.ETP * l.EP * l.PP) }

func (l Layout) String() string {
	return fmt.Sprintf("tp%d-pp%d-dp%d-etp%d-ep%d-edp%d", l.TP, l.PP, l.DP, l.ETP, l.EP, l.EDP())
}

// Coord is a rank's place on every axis.
type Coord struct{ TP, DP, PP, ETP, EP, EDP int }

// Coord returns rank's coordinates.
func (l Layout) Coord(rank int) Coord {
	return Coord{TP: rank % l.TP, DP: rank / l.TP % l.DP, PP: rank / (l.TP * l.DP),
		ETP: rank % l.ETP, EP: rank / l.ETP % l.EP, EDP: rank / (l.ETP * l.EP) % l.EDP()}
}

// Groups are one rank's communicators.
type Groups struct{ TP, DP, MP, ExpertTP, ExpertDP, ExpertMP parallel.Comm }

// Groups splits world into the layout's groups, each ordered by world rank.
func (l Layout) Groups(ctx context.Context, world parallel.Comm) (Groups, error) {
	c := l.Coord(world.Rank())
	var g Groups
	for _, s := range []struct {
		name  string
		color int
		dst   *parallel.Comm
	}{
		{"tp", c.PP*l.DP + c.DP, &g.TP},
		{"dp", c.PP*l.TP + c.TP, &g.DP},
		{"mp", c.DP, &g.MP},
		{"etp", (c.PP*l.EDP()+c.EDP)*l.EP + c.EP, &g.ExpertTP},
		{"edp", (c.PP*l.EP+c.EP)*l.ETP + c.ETP, &g.ExpertDP},
		{"emp", c.EDP, &g.ExpertMP},
	} {
		comm, err := world.Split(ctx, s.name, s.color, world.Rank())
		if err != nil {
			return g, err
		}
		*s.dst = comm
	}
	return g, nil
}

// Replicas returns the dense DP replicas whose tokens the experts of rank receive: those
// of the ranks of its expert-TP × EP group (same expert-DP and PP coordinates).
func (l Layout) Replicas(rank int) []int {
	c := l.Coord(rank)
	var out []int
	for r := range l.World() {
		if o := l.Coord(r); o.EDP == c.EDP && o.PP == c.PP && !slices.Contains(out, o.DP) {
			out = append(out, o.DP)
		}
	}
	slices.Sort(out)
	return out
}

// Spec is a parameter of the toy model.
type Spec struct {
	Name   string
	Shape  tensor.Shape // global
	Dim    int          // split over TP (expert-TP for experts), or -1
	Expert bool         // dim 0 (experts) split over EP
	Stage  int          // the pipeline stage holding it
}

// Experts is the number of experts of the toy model.
const Experts = 4

// Model returns the toy model of pp stages: each stage s has a dense weight split over TP,
// a TP-replicated bias, an expert weight [E, F, C] split over expert-TP along F and an
// expert bias [E, C] replicated over expert-TP.
func Model(pp int) []Spec {
	var out []Spec
	for s := range pp {
		pre := fmt.Sprintf("layers.%d.", s)
		out = append(out,
			Spec{Name: pre + "dense.weight", Shape: tensor.Shape{8, 6}, Dim: 0, Stage: s},
			Spec{Name: pre + "dense.bias", Shape: tensor.Shape{6}, Dim: -1, Stage: s},
			Spec{Name: pre + "mlp.experts.fc1.weight", Shape: tensor.Shape{Experts, 8, 6}, Dim: 1, Expert: true, Stage: s},
			Spec{Name: pre + "mlp.experts.fc2.bias", Shape: tensor.Shape{Experts, 6}, Dim: -1, Expert: true, Stage: s},
		)
	}
	return out
}

// Build returns rank c's shard of the parameter under l (nil if its stage is another),
// drawn from N(0, 0.25) by global coordinates.
func (s Spec) Build(dev *tensor.Device, dt tensor.DType, l Layout, c Coord) *param.Param {
	if s.Stage != c.PP {
		return nil
	}
	tp, tpRank := l.TP, c.TP
	if s.Expert {
		tp, tpRank = l.ETP, c.ETP
	}
	p := &param.Param{Name: s.Name, GlobalShape: s.Shape.Clone(), PartitionDim: s.Dim, PartitionStride: 1,
		TPReplicated: s.Dim < 0, NoWeightDecay: len(s.Shape) == 1 || s.Dim < 0, Expert: s.Expert}
	r := tensor.Whole(s.Shape...)
	if s.Dim >= 0 {
		r.Size[s.Dim] /= tp
		r.Start[s.Dim] = tpRank * r.Size[s.Dim]
		p.TPRank = tpRank
	}
	if s.Expert {
		r.Size[0] /= l.EP
		r.Start[0] = c.EP * r.Size[0]
		p.EPRank = c.EP
	}
	p.Tensor = tensor.NewRNG(1).Named(s.Name).Normal(dev, dt, r, 0, 0.5)
	p.Tensor.SetRequiresGrad(true)
	return p
}

// BuildAll returns rank c's parameters of the specs under l.
func BuildAll(dev *tensor.Device, dt tensor.DType, specs []Spec, l Layout, c Coord) []*param.Param {
	var out []*param.Param
	for _, s := range specs {
		if p := s.Build(dev, dt, l, c); p != nil {
			out = append(out, p)
		}
	}
	return out
}

// Samples is the number of samples of a step's global batch, split evenly between the
// DP replicas (so DP must divide it).
const Samples = 4

// sampleGrad returns the gradient of sample s's loss at step for p's elements: half of
// p's values rounded to 2⁻⁸, plus a multiple of 2⁻⁶ in [−2, 2] drawn by global
// coordinates.
func sampleGrad(p *param.Param, step, s int) []float64 {
	noise := tensor.NewRNG(2).Named(p.Name).Fold(uint64(step), uint64(s)).Uniform(p.Device(), tensor.F64, p.Region(), -2, 2)
	defer noise.Release()
	w := tensor.ToSlice[float64](p.Tensor.Detach().Cast(tensor.F64))
	g := tensor.ToSlice[float64](noise)
	for i := range g {
		g[i] = math.Round(g[i]*64)/64 + math.Round(w[i]*256)/512
	}
	return g
}

// replicaGrad returns the gradient of DP replica d's loss at step under l for p's
// elements: the mean over its samples.
func replicaGrad(p *param.Param, l Layout, step, d int) []float64 {
	per := Samples / l.DP
	sum := make([]float64, p.Numel())
	for s := d * per; s < (d+1)*per; s++ {
		for i, v := range sampleGrad(p, step, s) {
			sum[i] += v
		}
	}
	for i := range sum {
		sum[i] /= float64(per)
	}
	return sum
}

// Grad returns the gradient rank's parameter p receives at step under l, shaped like p:
// a dense parameter's is its DP replica's, an expert parameter's the sum over
// Replicas(rank). Averaged over DP they are the mean over the global batch's Samples, at
// every layout. It first calls p.BeforeForward, as a forward pass reading p would (the
// distributed optimizer may be gathering p). It panics if l.DP does not divide Samples.
func Grad(p *param.Param, l Layout, rank, step int) *tensor.Tensor {
	if Samples%l.DP != 0 {
		panic(fmt.Sprintf("experttest: DP %d does not divide the %d samples", l.DP, Samples))
	}
	p.BeforeForward()
	replicas := []int{l.Coord(rank).DP}
	if p.Expert {
		replicas = l.Replicas(rank)
	}
	sum := make([]float64, p.Numel())
	for _, d := range replicas {
		for i, v := range replicaGrad(p, l, step, d) {
			sum[i] += v
		}
	}
	return tensor.FromSlice(p.Device(), sum, p.Shape()...).Cast(p.DType())
}

// SetGrads sets the gradients of rank's parameters ps at step under l to Grad's. Call it
// after the optimizer's ZeroGrad.
func SetGrads(ps []*param.Param, l Layout, rank, step int) {
	for _, p := range ps {
		g := Grad(p, l, rank, step)
		p.Grad().CopyFrom(g)
		g.Release()
	}
}

// Loss returns a loss whose gradient with respect to each of ps is its Grad: the sum
// over ps of Grad(p) · p, element by element (the Grads are constants).
func Loss(ps []*param.Param, l Layout, rank, step int) *tensor.Tensor {
	var loss *tensor.Tensor
	for _, p := range ps {
		term := tensor.Sum(tensor.Mul(Grad(p, l, rank, step), p.Tensor))
		if loss == nil {
			loss = term
		} else {
			loss = tensor.Add(loss, term)
		}
	}
	return loss
}

// RegionOf returns the elements of region r of a whole tensor's values (row-major).
func RegionOf[T float32 | float64](whole []T, r tensor.Region) []T {
	var out []T
	idx := make([]int, len(r.Full))
	strides := r.Full.Strides()
	for range r.Size.Numel() {
		g := 0
		for d := range idx {
			g += (r.Start[d] + idx[d]) * strides[d]
		}
		out = append(out, whole[g])
		for d := len(idx) - 1; d >= 0; d-- { // the next index, last dim fastest
			if idx[d]++; idx[d] < r.Size[d] {
				break
			}
			idx[d] = 0
		}
	}
	return out
}
