package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"megago/tensor"
)

// Each fused kernel against its CPU twin: the composition of tensor ops on the CPU
// backend (forward, and backward through autograd) from the same host data.

// fusedData returns n deterministic values in [lo, hi).
func fusedData(seed uint64, n int, lo, hi float64) []float32 {
	r := rand.New(rand.NewPCG(seed, 99))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(lo + (hi-lo)*r.Float64())
	}
	return v
}

// twin holds the CPU results and a GPU device to compute the fused results on.
type twin struct {
	t    *testing.T
	b    *Backend
	cpu  *tensor.Device
	gpu  *tensor.Device
	want map[string]*tensor.Tensor
	got  map[string]*tensor.Tensor
}

func newTwin(t *testing.T) *twin {
	b := openTestBackend(t)
	return &twin{t: t, b: b, cpu: tensor.NewCPU(), gpu: tensor.NewDevice(b), want: map[string]*tensor.Tensor{}, got: map[string]*tensor.Tensor{}}
}

// pair uploads the same data to both devices.
func (w *twin) pair(v []float32, dt tensor.DType, shape ...int) (cpu, gpu *tensor.Tensor) {
	return tensor.FromSlice(w.cpu, v, shape...).Cast(dt), tensor.FromSlice(w.gpu, v, shape...).Cast(dt)
}

func (w *twin) check() {
	w.t.Helper()
	compareResults(w.t, w.want, w.got, nil)
}

func TestGPUFusedBiasGeLUDropoutAdd(t *testing.T) {
	w := newTwin(t)
	const rows, c = 6, 24
	xc, xg := w.pair(fusedData(1, rows*c, -3, 3), tensor.F32, rows, c)
	bc, bg := w.pair(fusedData(2, c, -1, 1), tensor.F32, c)
	rc, rg := w.pair(fusedData(3, rows*c, -1, 1), tensor.F32, rows, c)
	dyc, dyg := w.pair(fusedData(4, rows*c, -1, 1), tensor.F32, rows, c)

	xc.SetRequiresGrad(true)
	bc.SetRequiresGrad(true)
	y := tensor.GeLU(tensor.Add(xc, bc))
	y.BackwardWithGrad(dyc)
	w.want["bias_gelu"], w.want["bias_gelu/dx"], w.want["bias_gelu/dbias"] = y, xc.Grad(), bc.Grad()
	yg, dxg, dbg := tensor.Empty(w.gpu, tensor.F32, rows, c), tensor.Empty(w.gpu, tensor.F32, rows, c), tensor.Empty(w.gpu, tensor.F32, c)
	w.b.BiasActivation(tensor.OpGeLUTanh, yg.Span(), xg.Span(), bg.Span())
	w.b.BiasActivationBackward(tensor.OpGeLUTanh, dxg.Span(), dbg.Span(), dyg.Span(), xg.Span(), bg.Span())
	w.got["bias_gelu"], w.got["bias_gelu/dx"], w.got["bias_gelu/dbias"] = yg, dxg, dbg

	// Dropout of a shard: rows [2, 8) and columns [24, 48) of a [10, 48] tensor.
	rng := tensor.NewRNG(5).Named("dropout")
	full, start := tensor.Shape{10, 48}, []int{2, 24}
	x2 := tensor.FromSlice(w.cpu, fusedData(1, rows*c, -3, 3), rows, c).SetRequiresGrad(true)
	d := tensor.Add(rc, tensor.DropoutRegion(tensor.Add(x2, bc.Detach()), 0.3, rng, full, start))
	d.BackwardWithGrad(dyc)
	w.want["dropout_add"], w.want["dropout_add/dx"] = d, x2.Grad()
	dg, ddx := tensor.Empty(w.gpu, tensor.F32, rows, c), tensor.Empty(w.gpu, tensor.F32, rows, c)
	dp := tensor.DropoutParams{P: 0.3, Key: rng.Key(), Full: full, Start: start}
	w.b.BiasDropoutResidual(dg.Span(), xg.Span(), bg.Span(), rg.Span(), dp)
	w.b.BiasDropoutBackward(ddx.Span(), tensor.Span{}, dyg.Span(), dp)
	w.got["dropout_add"], w.got["dropout_add/dx"] = dg, ddx
	w.check()
}

func TestGPUFusedNormsWithResidual(t *testing.T) {
	w := newTwin(t)
	const rows, c = 5, 48
	xc, xg := w.pair(fusedData(5, rows*c, -2, 2), tensor.F32, rows, c)
	rc, rg := w.pair(fusedData(6, rows*c, -2, 2), tensor.F32, rows, c)
	wc, wg := w.pair(fusedData(7, c, 0.5, 1.5), tensor.F32, c)
	bc, bg := w.pair(fusedData(8, c, -1, 1), tensor.F32, c)
	t1c, t1g := w.pair(fusedData(9, rows*c, -1, 1), tensor.F32, rows, c)
	t2c, t2g := w.pair(fusedData(10, rows*c, -1, 1), tensor.F32, rows, c)
	for _, rms := range []bool{false, true} {
		name := map[bool]string{false: "layernorm", true: "rmsnorm"}[rms]
		x := xc.Detach().SetRequiresGrad(true)
		wl, bl := wc.Detach().SetRequiresGrad(true), bc.Detach().SetRequiresGrad(true)
		s := tensor.Add(x, rc)
		var y *tensor.Tensor
		if rms {
			y = tensor.RMSNorm(s, wl, 1e-5)
		} else {
			y = tensor.LayerNorm(s, wl, bl, 1e-5)
		}
		// s also feeds the residual stream, whose gradient is t2.
		tensor.Add(tensor.Sum(tensor.Mul(y, t1c)), tensor.Sum(tensor.Mul(s, t2c))).Backward()
		w.want[name], w.want[name+"/sum"], w.want[name+"/dx"], w.want[name+"/dw"] = y, s, x.Grad(), wl.Grad()

		yg, sg := tensor.Empty(w.gpu, tensor.F32, rows, c), tensor.Empty(w.gpu, tensor.F32, rows, c)
		mean, rstd := tensor.Empty(w.gpu, tensor.F32, rows), tensor.Empty(w.gpu, tensor.F32, rows)
		dx, dw, db := tensor.Empty(w.gpu, tensor.F32, rows, c), tensor.Empty(w.gpu, tensor.F32, c), tensor.Empty(w.gpu, tensor.F32, c)
		if rms {
			p := tensor.NormParams{Eps: 1e-5, RMS: true}
			w.b.ResidualNorm(yg.Span(), sg.Span(), tensor.Span{}, rstd.Span(), xg.Span(), rg.Span(), wg.Span(), tensor.Span{}, p)
			w.b.ResidualNormBackward(dx.Span(), dw.Span(), tensor.Span{}, t1g.Span(), t2g.Span(), sg.Span(), wg.Span(), tensor.Span{}, rstd.Span(), p)
		} else {
			p := tensor.NormParams{Eps: 1e-5}
			w.b.ResidualNorm(yg.Span(), sg.Span(), mean.Span(), rstd.Span(), xg.Span(), rg.Span(), wg.Span(), bg.Span(), p)
			w.b.ResidualNormBackward(dx.Span(), dw.Span(), db.Span(), t1g.Span(), t2g.Span(), sg.Span(), wg.Span(), mean.Span(), rstd.Span(), p)
			w.want[name+"/db"], w.got[name+"/db"] = bl.Grad(), db
		}
		w.got[name], w.got[name+"/sum"], w.got[name+"/dx"], w.got[name+"/dw"] = yg, sg, dx, dw
	}
	w.check()
}

// ropeTwin is nn's applyRoPE written with tensor ops: rotate_half with cos and sin cast to
// x's dtype.
func ropeTwin(x *tensor.Tensor, positions []int, theta float64) *tensor.Tensor {
	hs, t := x.Dim(-1), x.Dim(-2)
	half := hs / 2
	cos, sin := make([]float64, t*hs), make([]float64, t*hs)
	for i := 0; i < t; i++ {
		for j := 0; j < half; j++ {
			f := float64(positions[i]) * math.Pow(theta, -2*float64(j)/float64(hs))
			cos[i*hs+j], cos[i*hs+j+half] = math.Cos(f), math.Cos(f)
			sin[i*hs+j], sin[i*hs+j+half] = math.Sin(f), math.Sin(f)
		}
	}
	dev := x.Device()
	ct := tensor.FromSlice(dev, cos, t, hs).Cast(x.DType())
	st := tensor.FromSlice(dev, sin, t, hs).Cast(x.DType())
	parts := tensor.Split(x, -1, half, half)
	rot := tensor.Concat(-1, tensor.Neg(parts[1]), parts[0])
	return tensor.Add(tensor.Mul(x, ct), tensor.Mul(rot, st))
}

func TestGPUFusedRoPEAndEncoder(t *testing.T) {
	w := newTwin(t)
	const b, nh, tt, hs = 2, 3, 5, 8
	pos := []int{0, 7, 100, 3000, 4}
	xc, xg := w.pair(fusedData(11, b*nh*tt*hs, -1, 1), tensor.F32, b, nh, tt, hs)
	dyc, dyg := w.pair(fusedData(12, b*nh*tt*hs, -1, 1), tensor.F32, b, nh, tt, hs)
	x := xc.Detach().SetRequiresGrad(true)
	y := ropeTwin(x, pos, 10000)
	y.BackwardWithGrad(dyc)
	w.want["rope"], w.want["rope/dx"] = y, x.Grad()
	yg, dxg := tensor.Empty(w.gpu, tensor.F32, b, nh, tt, hs), tensor.Empty(w.gpu, tensor.F32, b, nh, tt, hs)
	w.b.RotaryEmbedding(yg.Span(), xg.Span(), tensor.RoPEParams{Positions: pos, Theta: 10000})
	w.b.RotaryEmbedding(dxg.Span(), dyg.Span(), tensor.RoPEParams{Positions: pos, Theta: 10000, Inverse: true})
	w.got["rope"], w.got["rope/dx"] = yg, dxg

	const v, c, maxT = 9, 16, 12
	wtec, wteg := w.pair(fusedData(13, v*c, -1, 1), tensor.F32, v, c)
	wpec, wpeg := w.pair(fusedData(14, maxT*c, -1, 1), tensor.F32, maxT, c)
	ids := []int64{1, 4, 4, 8, 0, 3, 1, 1} // [2, 4], repeats
	outGrad := fusedData(15, 2*4*c, -1, 1)
	wte, wpe := wtec.Detach().SetRequiresGrad(true), wpec.Detach().SetRequiresGrad(true)
	positions := tensor.FromSlice(w.cpu, []int64{3, 4, 5, 6}, 4)
	enc := tensor.Add(tensor.Embedding(wte, tensor.FromSlice(w.cpu, ids, 2, 4)), tensor.Embedding(wpe, positions))
	enc.BackwardWithGrad(tensor.FromSlice(w.cpu, outGrad, 2, 4, c))
	w.want["encoder"], w.want["encoder/dwte"], w.want["encoder/dwpe"] = enc, wte.Grad(), wpe.Grad()
	idsg := tensor.FromSlice(w.gpu, ids, 2, 4)
	encg := tensor.Empty(w.gpu, tensor.F32, 2, 4, c)
	dwte, dwpe := tensor.Zeros(w.gpu, tensor.F32, v, c), tensor.Zeros(w.gpu, tensor.F32, maxT, c)
	w.b.encoder(encg.Span(), wteg.Span(), wpeg.Span(), idsg.Span(), 3)
	w.b.encoderBackward(dwte.Span(), dwpe.Span(), tensor.FromSlice(w.gpu, outGrad, 2, 4, c).Span(), idsg.Span(), 3)
	w.got["encoder"], w.got["encoder/dwte"], w.got["encoder/dwpe"] = encg, dwte, dwpe
	w.check()
}

func TestGPUFlashAttention(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		for _, causal := range []bool{false, true} {
			t.Run(dt.String()+map[bool]string{false: "", true: "/causal"}[causal], func(t *testing.T) {
				w := newTwin(t)
				const b, nh, tt, hs = 2, 2, 70, 32 // T spans partial tiles
				scale := 1 / math.Sqrt(hs)
				qc, qg := w.pair(fusedData(21, b*nh*tt*hs, -2, 2), dt, b, nh, tt, hs)
				kc, kg := w.pair(fusedData(22, b*nh*tt*hs, -2, 2), dt, b, nh, tt, hs)
				vc, vg := w.pair(fusedData(23, b*nh*tt*hs, -1, 1), dt, b, nh, tt, hs)
				dc, dg := w.pair(fusedData(24, b*nh*tt*hs, -1, 1), dt, b, nh, tt, hs)
				// The twin in float32 from the same (rounded) inputs.
				q, k, v := qc.Cast(tensor.F32).SetRequiresGrad(true), kc.Cast(tensor.F32).SetRequiresGrad(true), vc.Cast(tensor.F32).SetRequiresGrad(true)
				s := tensor.MatMulT(q, k, false, true)
				o := tensor.MatMul(tensor.Softmax(s, tensor.SoftmaxOptions{Scale: scale, Causal: causal}), v)
				o.BackwardWithGrad(dc.Cast(tensor.F32))
				w.want["out"], w.want["dq"], w.want["dk"], w.want["dv"] = o.Cast(dt), q.Grad().Cast(dt), k.Grad().Cast(dt), v.Grad().Cast(dt)

				og, lse := tensor.Empty(w.gpu, dt, b, nh, tt, hs), tensor.Empty(w.gpu, tensor.F32, b*nh, tt)
				f := flashParams{tq: tt, tk: tt, group: 1, nh: nh, scale: float32(scale), causal: causal}
				w.b.flashAttention(og.Span(), lse.Span(), qg.Span(), kg.Span(), vg.Span(), f)
				dq, dk, dv := tensor.Empty(w.gpu, dt, b, nh, tt, hs), tensor.Empty(w.gpu, dt, b, nh, tt, hs), tensor.Empty(w.gpu, dt, b, nh, tt, hs)
				w.b.flashAttentionBackward(dq.Span(), dk.Span(), dv.Span(), tensor.Span{}, qg.Span(), kg.Span(), vg.Span(), og.Span(), lse.Span(), dg.Span(), tensor.Span{}, f)
				w.got["out"], w.got["dq"], w.got["dk"], w.got["dv"] = og, dq, dk, dv
				w.check()
			})
		}
	}
}

func TestGPUFusedLinear(t *testing.T) {
	w := newTwin(t)
	const m, k, n = 6, 16, 24
	xc, xg := w.pair(fusedData(31, m*k, -1, 1), tensor.F32, m, k)
	wc, wg := w.pair(fusedData(32, n*k, -1, 1), tensor.F32, n, k)
	bc, bg := w.pair(fusedData(33, n, -1, 1), tensor.F32, n)
	dyc, dyg := w.pair(fusedData(34, m*n, -1, 1), tensor.F32, m, n)

	x, wt, bias := xc.Detach().SetRequiresGrad(true), wc.Detach().SetRequiresGrad(true), bc.Detach().SetRequiresGrad(true)
	pre := tensor.Add(tensor.MatMulT(x, wt, false, true), bias)
	y := tensor.GeLU(pre)
	y.BackwardWithGrad(dyc)
	w.want["y"], w.want["pre"], w.want["dw"], w.want["dbias"] = y, pre, wt.Grad(), bias.Grad()
	w.want["dx_through_gelu"] = x.Grad()
	yg, preg := tensor.Empty(w.gpu, tensor.F32, m, n), tensor.Empty(w.gpu, tensor.F32, m, n)
	w.b.linear(yg.Span(), preg.Span(), xg.Span(), wg.Span(), bg.Span(), true)
	w.got["y"], w.got["pre"] = yg, preg

	// Backward: dpre = dy·gelu'(pre), computed by the next layer's data GEMM in a real
	// model; here a GEMM by the identity carries the DGeLU epilogue.
	eye := make([]float32, n*n)
	for i := 0; i < n; i++ {
		eye[i*n+i] = 1
	}
	dpre, dbias := tensor.Empty(w.gpu, tensor.F32, m, n), tensor.Empty(w.gpu, tensor.F32, n)
	w.b.linearBackwardData(dpre.Span(), dbias.Span(), dyg.Span(), tensor.FromSlice(w.gpu, eye, n, n).Span(), preg.Span())
	dw, dx := tensor.Empty(w.gpu, tensor.F32, n, k), tensor.Empty(w.gpu, tensor.F32, m, k)
	dbias2 := tensor.Empty(w.gpu, tensor.F32, n)
	w.b.linearBackwardWeight(dw.Span(), dbias2.Span(), dpre.Span(), xg.Span(), false)
	w.b.linearBackwardData(dx.Span(), tensor.Span{}, dpre.Span(), wg.Span(), tensor.Span{})
	w.got["dw"], w.got["dbias"], w.got["dx_through_gelu"] = dw, dbias, dx
	w.want["dbias_bgradb"], w.got["dbias_bgradb"] = bias.Grad(), dbias2
	w.check()
}
