package nn

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/parallel"
	"megago/tensor"
)

// The all-to-all context-parallel cores against tensor.AttentionReference on the whole
// sequence at one rank: outputs and q, k, v gradients in F64, with the dropout masks of
// CP=1 (drawn at the same global coordinates: sample offset 1, the heads of TP rank 1 of
// 2, every position).

// cpA2ATol bounds the differences from the reference: the online softmax and the
// gradients of replicated groups sum in another order.
const cpA2ATol = 1e-12

// a2aCase is one configuration: the CP size, the a2a+p2p sizes (nil: plain a2a), the
// query heads and key/value groups of the whole model (each TP rank holds half), the
// causal mask and attention dropout.
type a2aCase struct {
	name    string
	cp      int
	hier    []int
	nh, g   int
	causal  bool
	dropout float64
}

func TestCPA2A(t *testing.T) {
	cases := []a2aCase{
		{name: "a2a/cp1/causal/dropout", cp: 1, nh: 8, g: 4, causal: true, dropout: 0.25},
		{name: "a2a/cp2/causal", cp: 2, nh: 8, g: 8, causal: true},
		{name: "a2a/cp2/full", cp: 2, nh: 8, g: 8},
		{name: "a2a/cp2/gqa/dropout", cp: 2, nh: 8, g: 4, causal: true, dropout: 0.25},
		{name: "a2a/cp4/causal/dropout", cp: 4, nh: 8, g: 8, causal: true, dropout: 0.25},
		{name: "a2a/cp4/gqa-replicated", cp: 4, nh: 8, g: 4, causal: true},   // 2 groups per TP rank for 4 ranks
		{name: "a2a/cp4/mqa/full/dropout", cp: 4, nh: 8, g: 2, dropout: 0.1}, // 1 group per TP rank
		{name: "a2a+p2p/2x2/causal/gqa/dropout", cp: 4, hier: []int{2, 2}, nh: 8, g: 4, causal: true, dropout: 0.25},
		{name: "a2a+p2p/2x2/full", cp: 4, hier: []int{2, 2}, nh: 8, g: 8},
		{name: "a2a+p2p/2x2/mqa-replicated/dropout", cp: 4, hier: []int{2, 2}, nh: 8, g: 2, causal: true, dropout: 0.25},
		{name: "a2a+p2p/1x4/causal/dropout", cp: 4, hier: []int{1, 4}, nh: 8, g: 2, causal: true, dropout: 0.25},
		{name: "a2a+p2p/4x1/causal", cp: 4, hier: []int{4, 1}, nh: 8, g: 8, causal: true},
		{name: "a2a+p2p/1x2/full", cp: 2, hier: []int{1, 2}, nh: 8, g: 8},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkCPA2A(t, tc)
		})
	}
}

// a2aData is the whole problem: q [B, NH, T, HS], k, v [B, G, T, HS] and the output's
// gradient [B, NH, T, HS], as row-major values.
type a2aData struct {
	q, k, v, dout []float64
}

// The micro-batch, sequence and head size of every case.
const a2aBatch, a2aSeq, a2aHeadSize = 2, 16, 4

// tpRank is the simulated TP rank (of 2) whose heads the ranks hold.
const tpRank = 1

func checkCPA2A(t *testing.T, tc a2aCase) {
	t.Helper()
	rnd := rand.New(rand.NewPCG(1, uint64(tc.cp)))
	normal := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = rnd.NormFloat64()
		}
		return v
	}
	b, seq, hs := a2aBatch, a2aSeq, a2aHeadSize
	d := a2aData{q: normal(b * tc.nh * seq * hs), k: normal(b * tc.g * seq * hs), v: normal(b * tc.g * seq * hs), dout: normal(b * tc.nh * seq * hs)}
	nh, g := tc.nh/2, tc.g/2 // per TP rank
	o := cpAttnOptions{Causal: tc.causal, Scale: 1 / math.Sqrt(float64(hs)), Dropout: tc.dropout, Key: "layers.0.attn.probs.dropout"}
	if tc.dropout > 0 {
		o.Full, o.Start = tensor.Shape{b + 1, tc.nh, seq, seq}, []int{1, tpRank * nh, 0, 0}
	}
	rng := tensor.NewRNG(7)

	// The reference: this TP rank's heads over the whole sequence at one rank.
	dev := tensor.NewCPU()
	all := seqPositions(seq)
	q, k, v := a2aPart(dev, d.q, tc.nh, nh, all), a2aPart(dev, d.k, tc.g, g, all), a2aPart(dev, d.v, tc.g, g, all)
	ao := tensor.AttentionOptions{Scale: o.Scale, Causal: o.Causal}
	if o.Dropout > 0 {
		ao.Dropout, ao.RNG, ao.DropoutFull, ao.DropoutStart = o.Dropout, rng.Named(o.Key), o.Full, o.Start
	}
	ref, _ := tensor.AttentionReference(q, k, v, ao)
	ref.BackwardWithGrad(a2aPart(dev, d.dout, tc.nh, nh, all).Detach())
	want := [4][]float64{tensor.ToSlice[float64](ref), tensor.ToSlice[float64](q.Grad()), tensor.ToSlice[float64](k.Grad()), tensor.ToSlice[float64](v.Grad())}

	require.NoError(t, parallel.RunLocal(tc.cp, func(cp parallel.Comm) error {
		r := cp.Rank()
		dev := tensor.NewCPU()
		pos := CPPositions(seq, tc.cp, r)
		q, k, v := a2aPart(dev, d.q, tc.nh, nh, pos), a2aPart(dev, d.k, tc.g, g, pos), a2aPart(dev, d.v, tc.g, g, pos)
		p := &Pass{Ctx: context.Background(), Train: true, RNG: rng}
		ro := o
		ro.Positions = pos
		core := cpA2A
		if tc.hier != nil {
			h, err := newCPHierarchy(p.Ctx, cp, tc.hier)
			if err != nil {
				return err
			}
			core = h.a2aP2P
		}
		// [B, T/cp, NH·HS/tp] back to [B, NH/tp, T/cp, HS], the reference's layout
		out := core(p, cp, q, k, v, ro).Reshape(b, len(pos), nh, hs).Permute(0, 2, 1, 3)
		out.BackwardWithGrad(a2aPart(dev, d.dout, tc.nh, nh, pos).Detach())
		for i, got := range []*tensor.Tensor{out, q.Grad(), k.Grad(), v.Grad()} {
			heads := []int{nh, nh, g, g}[i]
			exp := pickPositions(want[i], b, heads, seq, hs, pos)
			if err := closeTo(tensor.ToSlice[float64](got), exp); err != nil {
				return fmt.Errorf("rank %d: %s: %w", r, []string{"out", "dq", "dk", "dv"}[i], err)
			}
		}
		return nil
	}))
}

// seqPositions returns 0..t−1.
func seqPositions(t int) []int {
	pos := make([]int, t)
	for i := range pos {
		pos[i] = i
	}
	return pos
}

// a2aPart returns the heads of TP rank tpRank (h of all) at positions pos of the
// whole [B, all, T, HS] values x as an F64 leaf requiring
// grad, [B, h, len(pos), HS].
func a2aPart(dev *tensor.Device, x []float64, all, h int, pos []int) *tensor.Tensor {
	b, t, hs := a2aBatch, a2aSeq, a2aHeadSize
	heads := pickHeads(x, b, all, t*hs, tpRank*h, h) // [B, h, T, HS]
	return tensor.FromSlice(dev, pickPositions(heads, b, h, t, hs, pos), b, h, len(pos), hs).SetRequiresGrad(true)
}

// pickHeads returns heads [lo, lo+n) of x [B, all, per] (per values a head).
func pickHeads(x []float64, b, all, per, lo, n int) []float64 {
	var out []float64
	for i := range b {
		out = append(out, x[(i*all+lo)*per:(i*all+lo+n)*per]...)
	}
	return out
}

// pickPositions returns positions pos of x [B, H, T, HS], [B, H, len(pos), HS].
func pickPositions(x []float64, b, h, t, hs int, pos []int) []float64 {
	var out []float64
	for i := range b * h {
		for _, p := range pos {
			out = append(out, x[(i*t+p)*hs:(i*t+p+1)*hs]...)
		}
	}
	return out
}

// closeTo says where got and want differ by more than cpA2ATol.
func closeTo(got, want []float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	for i := range got {
		if math.Abs(got[i]-want[i]) > cpA2ATol {
			return fmt.Errorf("element %d is %v, want %v", i, got[i], want[i])
		}
	}
	return nil
}

func TestCPA2APanics(t *testing.T) {
	require.NoError(t, parallel.RunLocal(2, func(cp parallel.Comm) error {
		dev := tensor.NewCPU()
		q := tensor.Zeros(dev, tensor.F64, 1, 3, 4, 2) // 3 heads for 2 ranks
		o := cpAttnOptions{Scale: 1, Positions: CPPositions(8, 2, cp.Rank())}
		p := &Pass{Ctx: context.Background()}
		assert.PanicsWithValue(t, "nn: context-parallel a2a: 3 heads per TP rank not divisible by the a2a group's 2 ranks",
			func() { cpA2A(p, cp, q, q, q, o) })
		return nil
	}))
}
