package nn

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/parallel"
	"megago/tensor"
)

// TestGPTWithMoETrainsAStep builds a Llama-style GPT whose odd layers are MoE blocks
// (shared expert with gate, alltoall dispatcher, grouped GEMM), takes one SGD step on a
// batch and checks that the step lowers the batch's loss, that every parameter got a
// gradient, and that the stats counted top-2 routing of every token.
func TestGPTWithMoETrainsAStep(t *testing.T) {
	cfg := LlamaConfig(4, 16, 4, 2, 32, 64)
	cfg.MoE = MoEConfig{NumExperts: 4, TopK: 2, FFNHidden: 8, LayerPattern: "0,1,0,1", SharedExpertFFNHidden: 8,
		SharedExpertGate: true, Dispatcher: "alltoall", GroupedGEMM: true}
	b := &Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(1), TP: parallel.Self()}
	m, err := NewGPT(b, cfg, Stage{})
	require.NoError(t, err)
	for i, l := range m.Block.Layers {
		require.Equal(t, i%2 == 1, l.MoE != nil, "layer %d", i)
		require.Equal(t, i%2 == 0, l.MLP != nil, "layer %d", i)
	}
	require.Equal(t, tensor.Shape{4, 8, 16}, paramByName(t, m, "layers.1.mlp.experts.fc1.weight").GlobalShape)
	ids := make([]int64, 2*12)
	for i := range ids {
		ids[i] = int64(i*7+3) % 64
	}
	in := tensor.FromSlice(b.Dev, ids[:len(ids)-2], 2, 11)
	labels := tensor.FromSlice(b.Dev, ids[2:], 2, 11)
	p := &Pass{Ctx: context.Background(), Train: true, RNG: tensor.NewRNG(2)}
	loss := func() *tensor.Tensor {
		l, _ := m.Loss(p, m.Forward(p, in, nil), labels)
		return l
	}
	l0 := loss()
	l0.Backward()
	const lr = 0.5
	for _, q := range m.Params() {
		require.NotNil(t, q.Grad(), q.Name)
		q.Tensor.CopyFrom(tensor.Sub(q.Tensor.Detach(), tensor.Scale(q.Grad(), lr)))
	}
	var l1 float64
	b.Dev.NoGrad(func() { l1 = loss().Item() })
	require.Less(t, l1, l0.Item())
	stats := MoEStats(m)
	require.Len(t, stats, 2)
	for i, s := range stats {
		require.Equal(t, 2*i+1, s.Layer)
		require.Equal(t, 2, s.Micro) // two forward passes
		var n int64
		for _, c := range s.TokensPerExpert {
			n += c
		}
		require.Equal(t, int64(2*22*2), n) // 2 passes × 22 tokens × top 2
	}
	require.Equal(t, 0, MoEStats(m)[0].Micro, "TakeStats resets")
}

// paramByName returns m's parameter name. It fails the test if there is none.
func paramByName(t *testing.T, m Module, name string) *Param {
	t.Helper()
	for _, p := range m.Params() {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no parameter %s", name)
	return nil
}

// TestGPTWithMoERecomputeFull checks that full activation recomputation of MoE layers
// gives the gradients of keeping every activation, bit for bit (the routing is replayed
// from the same inputs), and the same stats (not counted twice).
func TestGPTWithMoERecomputeFull(t *testing.T) {
	cfg := LlamaConfig(2, 16, 4, 2, 32, 64)
	cfg.MoE = MoEConfig{NumExperts: 4, TopK: 2, FFNHidden: 8, SharedExpertFFNHidden: 8}
	grads := func(rec Recompute) map[string]any {
		b := &Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(1), TP: parallel.Self(), Recompute: rec}
		m, err := NewGPT(b, cfg, Stage{})
		require.NoError(t, err)
		ids := make([]int64, 2*9)
		for i := range ids {
			ids[i] = int64(i*5+1) % 64
		}
		p := &Pass{Ctx: context.Background(), Train: true, RNG: tensor.NewRNG(2)}
		l, _ := m.Loss(p, m.Forward(p, tensor.FromSlice(b.Dev, ids, 2, 9), nil), tensor.FromSlice(b.Dev, ids, 2, 9))
		l.Backward()
		out := map[string]any{"stats": MoEStats(m)} // recorded once per forward pass
		for _, q := range m.Params() {
			out[q.Name] = tensor.ToSlice[float32](q.Grad())
		}
		return out
	}
	require.Equal(t, grads(RecomputeNone), grads(RecomputeFull))
}

func TestIsMoELayerPatterns(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    MoEConfig
		want string // one 0/1 per layer of 4
	}{
		{"no experts", MoEConfig{LayerFreq: 1}, "0000"},
		{"every layer", MoEConfig{NumExperts: 2}, "1111"},
		{"every second", MoEConfig{NumExperts: 2, LayerFreq: 2}, "1010"},
		{"pattern", MoEConfig{NumExperts: 2, LayerPattern: "0,1,1,0"}, "0110"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			for i := range 4 {
				got += map[bool]string{false: "0", true: "1"}[tc.c.IsMoELayer(i, 4)]
			}
			require.Equal(t, tc.want, got)
		})
	}
}
