package nn

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/parallel"
	"megago/tensor"
)

// TestDecodeStepMatchesForward: a prompt fed in chunks through a slot, beside another
// sequence in another slot, gives at every position the logits of one whole forward
// (Forward without a cache), bit for bit. "gpt2-hs16" has heads of 16, whose one-token
// steps the CPU backend attends reading the slots in place (its AVX-512 kernels).
func TestDecodeStepMatchesForward(t *testing.T) {
	cfgs := genConfigs()
	hs16 := cfgs["gpt2"]
	hs16.Hidden, hs16.Heads = 32, 2
	cfgs["gpt2-hs16"] = hs16
	for name, cfg := range cfgs {
		t.Run(name, func(t *testing.T) {
			b := &Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(7), TP: parallel.Self()}
			m, err := NewGPT(b, cfg, Stage{})
			require.NoError(t, err)
			prompt := []int32{3, 17, 2, 99, 42, 8, 77, 5, 0, 64, 64}
			other := []int32{9, 9, 1, 30, 31, 32, 33, 2, 4, 6}
			p := Eval(context.Background())
			var want []float64 // [T, V]
			b.Dev.NoGrad(func() {
				full := tensor.ToSlice[float64](m.Forward(p, tensor.FromSlice(b.Dev, prompt, 1, len(prompt)), nil)) // [1, T, Vp]
				for i := range prompt {
					want = append(want, full[i*m.Vp:i*m.Vp+cfg.Vocab]...)
				}
			})
			c := NewSlotCache(m, 3, 16)
			defer c.Release()
			var got []float64
			fed, fedOther := 0, 0
			for _, n := range []int{4, 1, 3, 2, 1} {
				o := min(2, len(other)-fedOther)
				ids := append(append([]int32(nil), other[fedOther:fedOther+o]...), prompt[fed:fed+n]...)
				rows, err := m.DecodeStep(p, c, ids, []DecodeSeq{{Slot: 2, Past: fedOther, N: o, Logits: 1}, {Slot: 0, Past: fed, N: n, Logits: n}})
				require.NoError(t, err)
				require.Len(t, rows, 1+n)
				for _, r := range rows[1:] {
					got = append(got, r...)
				}
				fed, fedOther = fed+n, fedOther+o
			}
			require.Equal(t, want, got)
		})
	}
}
