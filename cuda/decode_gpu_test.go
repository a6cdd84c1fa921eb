package cuda

import (
	"context"
	"testing"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// TestGPUDecodeStepFollowsForward: a GPT's decode steps on this backend (KV-cache slots,
// the flash kernel reading them in place) give the logits of a full forward over the same
// tokens on this backend, within float32 rounding (the products' shapes differ), for a
// prompt fed in chunks beside another sequence, asking for the logits of every row or of
// the last, then one token at a time, with no host fallback.
func TestGPUDecodeStepFollowsForward(t *testing.T) {
	b := openTestBackend(t)
	dev := tensor.NewDevice(b)
	cfg := nn.GPTConfig{TransformerConfig: nn.TransformerConfig{NumLayers: 2, Hidden: 64, Heads: 2, Vocab: 96,
		MaxPosition: 32, Bias: true}}
	m, err := nn.NewGPT(&nn.Builder{Dev: dev, DType: tensor.F32, RNG: tensor.NewRNG(7), TP: parallel.Self()}, cfg, nn.Stage{})
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int32{3, 17, 2, 91, 42, 8, 77, 5, 0, 64, 64}
	other := []int32{9, 9, 1, 30, 31, 32, 33, 2, 4, 6}
	p := nn.Eval(context.Background())
	var want []float64 // [T, V]
	dev.NoGrad(func() {
		full := values(m.Forward(p, tensor.FromSlice(dev, prompt, 1, len(prompt)), nil)) // [1, T, Vp]
		for i := range prompt {
			want = append(want, full[i*m.Vp:i*m.Vp+cfg.Vocab]...)
		}
	})
	c := nn.NewSlotCache(m, 3, 16)
	defer c.Release()
	before := b.fallbacks.Load()
	fed, fedOther := 0, 0
	// The prompt's chunks ask for the logits of all their rows, or of the last only (the
	// last layer then runs on that row alone), then one token a step.
	for _, st := range [][2]int{{4, 4}, {3, 1}, {2, 1}, {1, 1}, {1, 1}} {
		n, nl := st[0], st[1]
		o := min(1, len(other)-fedOther) // the other sequence: one token a step
		ids := append(append([]int32(nil), other[fedOther:fedOther+o]...), prompt[fed:fed+n]...)
		rows, err := m.DecodeStep(p, c, ids, []nn.DecodeSeq{{Slot: 2, Past: fedOther, N: o, Logits: 1}, {Slot: 0, Past: fed, N: n, Logits: nl}})
		if err != nil {
			t.Fatal(err)
		}
		for j, r := range rows[1:] {
			pos := fed + n - nl + j
			for v, got := range r {
				w := want[pos*cfg.Vocab+v]
				if d := got - w; d > tolerance(tensor.F32, w) || -d > tolerance(tensor.F32, w) {
					t.Fatalf("position %d, logit %d: decode %v, forward %v", pos, v, got, w)
				}
			}
		}
		fed, fedOther = fed+n, fedOther+o
	}
	if fell := b.fallbacks.Load() - before; fell != 0 {
		t.Errorf("%d host fallback calls in the decode steps", fell)
	}
}
