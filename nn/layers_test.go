package nn

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/parallel"
	"megago/tensor"
)

// onRanks runs fn on tp goroutine ranks, each with its own CPU device, and returns each
// rank's result. fn reports mismatches with t.Error (it runs off the test goroutine).
func onRanks[R any](t *testing.T, tp int, fn func(c parallel.Comm, dev *tensor.Device) (R, error)) []R {
	t.Helper()
	out := make([]R, tp)
	err := parallel.RunLocal(tp, func(c parallel.Comm) error {
		r, err := fn(c, tensor.NewCPU())
		out[c.Rank()] = r // each rank writes its own element
		return err
	})
	require.NoError(t, err)
	return out
}

// rankBuilder is a float64 Builder on dev for TP group c.
func rankBuilder(c parallel.Comm, dev *tensor.Device) *Builder {
	return &Builder{Dev: dev, DType: tensor.F64, RNG: tensor.NewRNG(7), TP: c}
}

// seqValues returns n deterministic values in about [−1, 1] (no two equal).
func seqValues(n, salt int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = math.Sin(float64(i*7+salt*13+1)) * (1 + float64(i%5)/10)
	}
	return v
}

// denseRef returns y = x·Wᵀ + b for x [N, I], w [O, I], b [O] (nil: no bias), row-major.
func denseRef(x, w, b []float64, n, in, out int) []float64 {
	y := make([]float64, n*out)
	for i := 0; i < n; i++ {
		for o := 0; o < out; o++ {
			s := 0.0
			if b != nil {
				s = b[o]
			}
			for k := 0; k < in; k++ {
				s += x[i*in+k] * w[o*in+k]
			}
			y[i*out+o] = s
		}
	}
	return y
}

// denseGradRef returns the gradients of Σ gy·y for y = x·Wᵀ + b: dx [N, I], dw [O, I],
// db [O].
func denseGradRef(x, w, gy []float64, n, in, out int) (dx, dw, db []float64) {
	dx, dw, db = make([]float64, n*in), make([]float64, out*in), make([]float64, out)
	for i := 0; i < n; i++ {
		for o := 0; o < out; o++ {
			g := gy[i*out+o]
			db[o] += g
			for k := 0; k < in; k++ {
				dx[i*in+k] += g * w[o*in+k]
				dw[o*in+k] += g * x[i*in+k]
			}
		}
	}
	return dx, dw, db
}

// cols returns columns [lo, lo+n) of the row-major matrix m with width w.
func cols(m []float64, w, lo, n int) []float64 {
	var out []float64
	for i := 0; i < len(m)/w; i++ {
		out = append(out, m[i*w+lo:i*w+lo+n]...)
	}
	return out
}

// matmulTol: the references and the layers sum the same products in different orders.
const matmulTol = 1e-12

func TestColumnParallelLinear(t *testing.T) {
	const b, tt, in, out = 2, 3, 6, 8
	n := b * tt
	x, w, bias, gy := seqValues(n*in, 1), seqValues(out*in, 2), seqValues(out, 3), seqValues(n*out, 4)
	y := denseRef(x, w, bias, n, in, out)
	dx, dw, db := denseGradRef(x, w, gy, n, in, out)
	for _, tp := range []int{1, 2, 4} {
		for _, mode := range []string{"split", "gather", "skip-bias"} {
			t.Run(fmt.Sprintf("tp%d/%s", tp, mode), func(t *testing.T) {
				onRanks(t, tp, func(c parallel.Comm, dev *tensor.Device) (struct{}, error) {
					l := NewColumnParallelLinear(rankBuilder(c, dev), "fc", in, out, LinearOptions{Bias: true, Init: Normal(1),
						GatherOutput: mode == "gather", SkipBiasAdd: mode == "skip-bias"})
					if err := LoadGlobal(l.Params(), map[string]*tensor.Tensor{
						"fc.weight": tensor.FromSlice(dev, w, out, in), "fc.bias": tensor.FromSlice(dev, bias, out)}); err != nil {
						return struct{}{}, err
					}
					xt := tensor.FromSlice(dev, x, b, tt, in).SetRequiresGrad(true)
					got, gotBias := l.ForwardWithBias(Eval(context.Background()), xt)
					lo, width := c.Rank()*out/tp, out/tp // this rank's output features
					wantY, wantGY := cols(y, out, lo, width), cols(gy, out, lo, width)
					if mode == "gather" {
						lo, width, wantY, wantGY = 0, out, y, gy
					}
					if mode == "skip-bias" {
						assertInDeltaSlice(t, bias[lo:lo+width], tensor.ToSlice[float64](gotBias), 0, "returned bias")
						got = tensor.Add(got, gotBias)
					} else if gotBias != nil {
						t.Errorf("rank %d: bias returned without SkipBiasAdd", c.Rank())
					}
					assertInDeltaSlice(t, wantY, tensor.ToSlice[float64](got), matmulTol, fmt.Sprintf("rank %d output", c.Rank()))
					tensor.Sum(tensor.Mul(got, tensor.FromSlice(dev, wantGY, b, tt, width))).Backward()
					// CopyToTP's backward all-reduces the partial input gradients (or, with
					// GatherOutput, GatherFromTP's backward hands each rank its slice).
					assertInDeltaSlice(t, dx, tensor.ToSlice[float64](xt.Grad()), matmulTol, fmt.Sprintf("rank %d dx", c.Rank()))
					lo, width = c.Rank()*out/tp, out/tp
					assertInDeltaSlice(t, dw[lo*in:(lo+width)*in], tensor.ToSlice[float64](l.Weight.Grad()), matmulTol, "dW")
					assertInDeltaSlice(t, db[lo:lo+width], tensor.ToSlice[float64](l.Bias.Grad()), matmulTol, "db")
					return struct{}{}, nil
				})
			})
		}
	}
}

func TestColumnParallelLinearGatherAddsBias(t *testing.T) {
	// With GatherOutput the bias is added before the gather, even with SkipBiasAdd: a
	// per-rank bias slice could not be added to the gathered output.
	onRanks(t, 2, func(c parallel.Comm, dev *tensor.Device) (struct{}, error) {
		l := NewColumnParallelLinear(rankBuilder(c, dev), "fc", 3, 4, LinearOptions{Bias: true, Init: Normal(1),
			GatherOutput: true, SkipBiasAdd: true})
		_, bias := l.ForwardWithBias(Eval(context.Background()), tensor.Ones(dev, tensor.F64, 1, 2, 3))
		if bias != nil {
			t.Errorf("rank %d: bias returned with GatherOutput", c.Rank())
		}
		return struct{}{}, nil
	})
}

func TestLinearOptionsOfOtherLayersPanic(t *testing.T) {
	b := &Builder{Dev: tensor.NewCPU(), DType: tensor.F64, RNG: tensor.NewRNG(7), TP: parallel.Self()}
	for _, tc := range []struct {
		want  string
		build func()
	}{
		{"nn: ColumnParallelLinear fc: GatherOutput false, SkipBiasAdd false, ScatterInput true",
			func() { NewColumnParallelLinear(b, "fc", 2, 2, LinearOptions{ScatterInput: true}) }},
		{"nn: RowParallelLinear fc: GatherOutput true, SkipBiasAdd false, ScatterInput false",
			func() { NewRowParallelLinear(b, "fc", 2, 2, LinearOptions{GatherOutput: true}) }},
		{"nn: Linear fc: GatherOutput false, SkipBiasAdd true, ScatterInput false",
			func() { NewLinear(b, "fc", 2, 2, LinearOptions{SkipBiasAdd: true}) }},
	} {
		t.Run(strings.Fields(tc.want)[1], func(t *testing.T) {
			defer func() {
				if r := recover(); r == nil || !strings.HasPrefix(fmt.Sprint(r), tc.want) {
					t.Errorf("panic %v, want one starting %q", r, tc.want)
				}
			}()
			tc.build()
		})
	}
}

func TestRowParallelLinear(t *testing.T) {
	const b, tt, in, out = 2, 3, 8, 5
	n := b * tt
	x, w, bias, gy := seqValues(n*in, 5), seqValues(out*in, 6), seqValues(out, 7), seqValues(n*out, 8)
	y := denseRef(x, w, bias, n, in, out)
	dx, dw, db := denseGradRef(x, w, gy, n, in, out)
	for _, tp := range []int{1, 2, 4} {
		for _, parallelIn := range []bool{true, false} {
			t.Run(fmt.Sprintf("tp%d/input-parallel=%v", tp, parallelIn), func(t *testing.T) {
				onRanks(t, tp, func(c parallel.Comm, dev *tensor.Device) (struct{}, error) {
					l := NewRowParallelLinear(rankBuilder(c, dev), "fc", in, out, LinearOptions{Bias: true, Init: Normal(1),
						ScatterInput: !parallelIn})
					if err := LoadGlobal(l.Params(), map[string]*tensor.Tensor{
						"fc.weight": tensor.FromSlice(dev, w, out, in), "fc.bias": tensor.FromSlice(dev, bias, out)}); err != nil {
						return struct{}{}, err
					}
					lo, width := c.Rank()*in/tp, in/tp // this rank's input features
					xs, wantDX := x, dx
					if parallelIn {
						xs, wantDX = cols(x, in, lo, width), cols(dx, in, lo, width)
					}
					xt := tensor.FromSlice(dev, xs, b, tt, len(xs)/n).SetRequiresGrad(true)
					got := l.Forward(Eval(context.Background()), xt)
					assertInDeltaSlice(t, y, tensor.ToSlice[float64](got), matmulTol, fmt.Sprintf("rank %d output", c.Rank()))
					tensor.Sum(tensor.Mul(got, tensor.FromSlice(dev, gy, b, tt, out))).Backward()
					// ScatterToTP's backward all-gathers the input gradient.
					assertInDeltaSlice(t, wantDX, tensor.ToSlice[float64](xt.Grad()), matmulTol, fmt.Sprintf("rank %d dx", c.Rank()))
					assertInDeltaSlice(t, cols(dw, in, lo, width), tensor.ToSlice[float64](l.Weight.Grad()), matmulTol, "dW")
					assertInDeltaSlice(t, db, tensor.ToSlice[float64](l.Bias.Grad()), matmulTol, "db (replicated)")
					return struct{}{}, nil
				})
			})
		}
	}
}

func TestVocabParallelEmbedding(t *testing.T) {
	const vp, c = 16, 3
	// Ids owned by every rank at tp 4 (4 rows each), repeated ids to accumulate gradients.
	ids := []int64{0, 5, 15, 4, 8, 12, 3, 11, 5, 15, 9, 0}
	table, gy := seqValues(vp*c, 9), seqValues(len(ids)*c, 10)
	want, dTable := make([]float64, 0, len(ids)*c), make([]float64, vp*c)
	for i, id := range ids {
		want = append(want, table[int(id)*c:int(id+1)*c]...)
		for k := 0; k < c; k++ {
			dTable[int(id)*c+k] += gy[i*c+k]
		}
	}
	for _, tp := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("tp%d", tp), func(t *testing.T) {
			onRanks(t, tp, func(cm parallel.Comm, dev *tensor.Device) (struct{}, error) {
				e := NewVocabParallelEmbedding(rankBuilder(cm, dev), "word", vp, c, Normal(1))
				if err := LoadGlobal(e.Params(), map[string]*tensor.Tensor{"word.weight": tensor.FromSlice(dev, table, vp, c)}); err != nil {
					return struct{}{}, err
				}
				got := e.Forward(Eval(context.Background()), tensor.FromSlice(dev, ids, 3, 4))
				if !got.Shape().Equal(tensor.Shape{3, 4, c}) {
					t.Errorf("rank %d: output %v", cm.Rank(), got.Shape())
				}
				// Each id's row comes from one rank; the others add exact zeros.
				assertInDeltaSlice(t, want, tensor.ToSlice[float64](got), 0, fmt.Sprintf("rank %d output", cm.Rank()))
				tensor.Sum(tensor.Mul(got, tensor.FromSlice(dev, gy, 3, 4, c))).Backward()
				rows := vp / tp
				assertInDeltaSlice(t, dTable[cm.Rank()*rows*c:(cm.Rank()+1)*rows*c], tensor.ToSlice[float64](e.Weight.Grad()), 1e-15,
					fmt.Sprintf("rank %d table gradient", cm.Rank())) // repeated ids sum in another order
				return struct{}{}, nil
			})
		})
	}
}

func TestVocabParallelEmbeddingPanicsOnBadID(t *testing.T) {
	onRanks(t, 2, func(c parallel.Comm, dev *tensor.Device) (struct{}, error) {
		e := NewVocabParallelEmbedding(rankBuilder(c, dev), "word", 8, 2, Normal(1))
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "id 8 at position 1 outside [0, 8)") {
				t.Errorf("rank %d: panic %v, want one naming id 8", c.Rank(), r)
			}
		}()
		e.Forward(Eval(context.Background()), tensor.FromSlice(dev, []int64{1, 8}, 1, 2))
		return struct{}{}, nil
	})
}

func TestRoPEMatchesRotateHalf(t *testing.T) {
	const b, nh, tt, hs, theta = 2, 3, 4, 8, 10000.0
	positions := []int{0, 7, 2, 31}
	x := seqValues(b*nh*tt*hs, 11)
	// Hugging Face Llama: inv_freq_i = θ^(−2i/HS); emb = cat(freqs, freqs);
	// out = x·cos(emb) + rotate_half(x)·sin(emb), rotate_half(x) = cat(−x2, x1).
	want := make([]float64, len(x))
	half := hs / 2
	for row := 0; row < b*nh*tt; row++ {
		pos := float64(positions[row%tt])
		v := x[row*hs : (row+1)*hs]
		for j := 0; j < hs; j++ {
			i := j % half
			angle := pos / math.Pow(theta, float64(2*i)/hs)
			var rot float64 // rotate_half(x)[j]: −x2 in the first half, x1 in the second
			if j < half {
				rot = -v[j+half]
			} else {
				rot = v[j-half]
			}
			want[row*hs+j] = v[j]*math.Cos(angle) + rot*math.Sin(angle)
		}
	}
	dev := tensor.NewCPU()
	got := tensor.RoPEReference(tensor.FromSlice(dev, x, b, nh, tt, hs), positions, theta)
	require.InDeltaSlice(t, want, tensor.ToSlice[float64](got), 1e-14) // Pow vs 1/Pow rounding
}

func TestInitByGlobalCoordinate(t *testing.T) {
	// VocabMultiple 1 keeps Vp = 100 at tp 1 and 2, so every global shape is the same.
	gpt2 := GPTConfig{TransformerConfig: TransformerConfig{NumLayers: 2, Hidden: 16, Heads: 4, Vocab: 100,
		MaxPosition: 8, Bias: true}, VocabMultiple: 1}
	llama := LlamaConfig(2, 16, 4, 2, 24, 100)
	llama.VocabMultiple = 1
	for name, cfg := range map[string]GPTConfig{"gpt2": gpt2, "llama-gqa": llama} {
		for _, dt := range []tensor.DType{tensor.F64, tensor.F32} {
			t.Run(fmt.Sprintf("%s/%v", name, dt), func(t *testing.T) {
				build := func(c parallel.Comm, dev *tensor.Device) (map[string]*Param, error) {
					m, err := NewGPT(&Builder{Dev: dev, DType: dt, RNG: tensor.NewRNG(7), TP: c}, cfg, Stage{})
					if err != nil {
						return nil, err
					}
					ps := map[string]*Param{}
					for _, p := range m.Params() {
						ps[p.Name] = p
					}
					return ps, nil
				}
				ref := onRanks(t, 1, build)[0]
				for r, shard := range onRanks(t, 2, build) {
					require.Len(t, shard, len(ref))
					for n, p := range shard {
						whole := ref[n]
						require.NotNil(t, whole, n)
						require.Equal(t, whole.GlobalShape, p.GlobalShape, n)
						got := p.Tensor
						if p.PartitionDim < 0 {
							require.Equal(t, tensor.ToSlice[float64](whole.Tensor), tensor.ToSlice[float64](got), "rank %d %s", r, n)
							continue
						}
						d, start, size := p.PartitionDim, p.Start()[p.PartitionDim], p.Dim(p.PartitionDim)
						// Bitwise: the same generator draws the same elements.
						want := tensor.ToSlice[float64](whole.Tensor.Detach().Narrow(d, start, size))
						require.Equal(t, want, tensor.ToSlice[float64](got), "rank %d %s", r, n)
					}
				}
			})
		}
	}
}
