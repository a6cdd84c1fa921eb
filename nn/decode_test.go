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

// TestDecodeStepLastLayerRows: steps whose chunks ask for the logits of some of their
// rows, or none (the last layer then runs its attention and MLP on those rows only and
// stores the others' keys and values alone), give Forward's logits at those positions,
// bit for bit, in later steps too (which read the keys and values stored so).
func TestDecodeStepLastLayerRows(t *testing.T) {
	for name, cfg := range genConfigs() {
		t.Run(name, func(t *testing.T) {
			b := &Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(7), TP: parallel.Self()}
			m, err := NewGPT(b, cfg, Stage{})
			require.NoError(t, err)
			toks := [][]int32{{3, 17, 2, 99, 42, 8, 77, 5, 0, 64, 64}, {9, 9, 1, 30, 31, 32, 33, 2, 4, 6}}
			p := Eval(context.Background())
			want := make([][]float64, len(toks)) // [seq][T·V]
			b.Dev.NoGrad(func() {
				for s, ts := range toks {
					full := tensor.ToSlice[float64](m.Forward(p, tensor.FromSlice(b.Dev, ts, 1, len(ts)), nil)) // [1, T, Vp]
					for i := range ts {
						want[s] = append(want[s], full[i*m.Vp:i*m.Vp+cfg.Vocab]...)
					}
				}
			})
			c := NewSlotCache(m, 2, 16)
			defer c.Release()
			steps := [][2][2]int{ // per sequence: new tokens, rows with logits
				{{4, 0}, {3, 0}}, // no logits at all
				{{3, 1}, {2, 2}},
				{{1, 1}, {1, 0}},
				{{2, 2}, {3, 1}},
				{{1, 1}, {1, 1}},
			}
			fed := []int{0, 0}
			for i, st := range steps {
				var ids []int32
				var seqs []DecodeSeq
				for s, nl := range st {
					ids = append(ids, toks[s][fed[s]:fed[s]+nl[0]]...)
					seqs = append(seqs, DecodeSeq{Slot: s, Past: fed[s], N: nl[0], Logits: nl[1]})
				}
				rows, err := m.DecodeStep(p, c, ids, seqs)
				require.NoError(t, err)
				r := 0
				for s, nl := range st {
					fed[s] += nl[0]
					for pos := fed[s] - nl[1]; pos < fed[s]; pos++ {
						require.Equal(t, want[s][pos*cfg.Vocab:(pos+1)*cfg.Vocab], rows[r], "step %d, sequence %d, position %d", i, s, pos)
						r++
					}
				}
				require.Len(t, rows, r, "step %d", i)
			}
		})
	}
}
