package cuda

import (
	"testing"

	"megago/tensor"
)

// The row-wise fused ops through tensor's public API on this backend against the same ops
// on the CPU backend (whose kernels the tensor package tests against the unfused
// references): forward and backward, F32 within float32 rounding, BF16 within bf16
// rounding, and no call falling back to the host.

// rowCase builds its inputs on dev from fixed data, runs a fused op forward and backward
// and returns its outputs and input gradients by name.
type rowCase func(dev *tensor.Device, dt tensor.DType) map[string]*tensor.Tensor

// rowLeaf returns a tensor of fusedData on dev, cast to dt, that requires a gradient.
func rowLeaf(dev *tensor.Device, dt tensor.DType, seed uint64, lo, hi float64, shape ...int) *tensor.Tensor {
	n := tensor.Shape(shape).Numel()
	return tensor.FromSlice(dev, fusedData(seed, n, lo, hi), shape...).Cast(dt).SetRequiresGrad(true)
}

const fusedRows, fusedC = 6, 40

// rowCases returns the cases by name.
func rowCases() map[string]rowCase {
	return map[string]rowCase{
		"residual_layernorm": func(dev *tensor.Device, dt tensor.DType) map[string]*tensor.Tensor {
			return normCase(dev, dt, false, true)
		},
		"residual_rmsnorm": func(dev *tensor.Device, dt tensor.DType) map[string]*tensor.Tensor {
			return normCase(dev, dt, true, true)
		},
		"layernorm": func(dev *tensor.Device, dt tensor.DType) map[string]*tensor.Tensor {
			return normCase(dev, dt, false, false)
		},
		"rmsnorm": func(dev *tensor.Device, dt tensor.DType) map[string]*tensor.Tensor {
			return normCase(dev, dt, true, false)
		},
		"gelu_tanh": func(dev *tensor.Device, dt tensor.DType) map[string]*tensor.Tensor {
			return geluCase(dev, dt, tensor.OpGeLUTanh)
		},
		"gelu_erf": func(dev *tensor.Device, dt tensor.DType) map[string]*tensor.Tensor {
			return geluCase(dev, dt, tensor.OpGeLUErf)
		},
		"swiglu": func(dev *tensor.Device, dt tensor.DType) map[string]*tensor.Tensor {
			g, u := rowLeaf(dev, dt, 41, -4, 4, fusedRows, fusedC), rowLeaf(dev, dt, 42, -2, 2, fusedRows, fusedC)
			gb, ub := rowLeaf(dev, dt, 43, -1, 1, fusedC), rowLeaf(dev, dt, 44, -1, 1, fusedC)
			y := tensor.BiasSwiGLU(g, u, gb, ub)
			y.BackwardWithGrad(rowLeaf(dev, dt, 45, -1, 1, fusedRows, fusedC).Detach())
			return map[string]*tensor.Tensor{"y": y, "dgate": g.Grad(), "dup": u.Grad(), "dgb": gb.Grad(), "dub": ub.Grad()}
		},
		"dropout": func(dev *tensor.Device, dt tensor.DType) map[string]*tensor.Tensor {
			// A shard: rows [2, 8) and columns [40, 80) of a [10, 80] tensor.
			x, b, r := rowLeaf(dev, dt, 51, -3, 3, fusedRows, fusedC), rowLeaf(dev, dt, 52, -1, 1, fusedC), rowLeaf(dev, dt, 53, -1, 1, fusedRows, fusedC)
			rng := tensor.NewRNG(7).Named("hidden")
			y := tensor.BiasDropoutAdd(x, b, r, 0.25, rng, tensor.Shape{10, 80}, []int{2, 40})
			y.BackwardWithGrad(rowLeaf(dev, dt, 54, -1, 1, fusedRows, fusedC).Detach())
			return map[string]*tensor.Tensor{"y": y, "dx": x.Grad(), "db": b.Grad(), "dres": r.Grad()}
		},
		"dropout_p0": func(dev *tensor.Device, dt tensor.DType) map[string]*tensor.Tensor {
			x, b := rowLeaf(dev, dt, 55, -3, 3, fusedRows, fusedC), rowLeaf(dev, dt, 56, -1, 1, fusedC)
			y := tensor.BiasDropoutAdd(x, b, nil, 0, tensor.NewRNG(7), tensor.Shape{fusedRows, fusedC}, []int{0, 0})
			y.BackwardWithGrad(rowLeaf(dev, dt, 57, -1, 1, fusedRows, fusedC).Detach())
			return map[string]*tensor.Tensor{"y": y, "dx": x.Grad(), "db": b.Grad()}
		},
		"rope": func(dev *tensor.Device, dt tensor.DType) map[string]*tensor.Tensor {
			x := rowLeaf(dev, dt, 61, -1, 1, 2, 3, 5, 16)
			y := tensor.RoPE(x, []int{0, 7, 100, 3000, 4}, 10000)
			y.BackwardWithGrad(rowLeaf(dev, dt, 62, -1, 1, 2, 3, 5, 16).Detach())
			return map[string]*tensor.Tensor{"y": y, "dx": x.Grad()}
		},
	}
}

// normCase runs AddLayerNorm or AddRMSNorm (LayerNorm or RMSNorm of x alone without
// residual) with the sum also feeding the residual stream.
func normCase(dev *tensor.Device, dt tensor.DType, rms, residual bool) map[string]*tensor.Tensor {
	x, w, b := rowLeaf(dev, dt, 31, -2, 2, fusedRows, fusedC), rowLeaf(dev, dt, 32, 0.5, 1.5, fusedC), rowLeaf(dev, dt, 33, -1, 1, fusedC)
	var r *tensor.Tensor
	if residual {
		r = rowLeaf(dev, dt, 34, -2, 2, fusedRows, fusedC)
	}
	var y, s *tensor.Tensor
	if rms {
		y, s = tensor.AddRMSNorm(x, r, w, 1e-5)
	} else {
		y, s = tensor.AddLayerNorm(x, r, w, b, 1e-5)
	}
	loss := tensor.Sum(tensor.Mul(y, rowLeaf(dev, dt, 35, -1, 1, fusedRows, fusedC).Detach()).Cast(tensor.F32))
	if residual {
		loss = tensor.Add(loss, tensor.Sum(tensor.Mul(s, rowLeaf(dev, dt, 36, -1, 1, fusedRows, fusedC).Detach()).Cast(tensor.F32)))
	}
	loss.Backward()
	out := map[string]*tensor.Tensor{"y": y, "dx": x.Grad(), "dw": w.Grad()}
	if residual {
		out["sum"], out["dres"] = s, r.Grad()
	}
	if !rms {
		out["db"] = b.Grad()
	}
	return out
}

// geluCase runs BiasGeLU of the given form.
func geluCase(dev *tensor.Device, dt tensor.DType, form tensor.UnaryOp) map[string]*tensor.Tensor {
	x, b := rowLeaf(dev, dt, 21, -4, 4, fusedRows, fusedC), rowLeaf(dev, dt, 22, -1, 1, fusedC)
	y := tensor.BiasGeLU(x, b, form)
	y.BackwardWithGrad(rowLeaf(dev, dt, 23, -1, 1, fusedRows, fusedC).Detach())
	return map[string]*tensor.Tensor{"y": y, "dx": x.Grad(), "db": b.Grad()}
}

func TestGPURowKernelsFollowCPU(t *testing.T) {
	b := openTestBackend(t)
	gpu, cpu := tensor.NewDevice(b), tensor.NewCPU()
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		for name, run := range rowCases() {
			t.Run(dt.String()+"/"+name, func(t *testing.T) {
				compareResults(t, run(cpu, dt), run(gpu, dt), nil)
			})
		}
	}
	if n := b.fallbacks.Load(); n != 0 {
		t.Errorf("%d row kernel calls fell back to the host", n)
	}
}

// TestGPUDropoutMaskMatchesCPU checks the dropout mask bit for bit: with x = 1 and no
// bias or residual, each element is exactly 0 or 1/(1−p) on both backends.
func TestGPUDropoutMaskMatchesCPU(t *testing.T) {
	b := openTestBackend(t)
	rng := tensor.NewRNG(11).Named("attn")
	full, start := tensor.Shape{3, 9, 70}, []int{1, 2, 5}
	mask := func(dev *tensor.Device) *tensor.Tensor {
		x := tensor.Full(dev, tensor.F32, 1, 2, 7, 64)
		return tensor.BiasDropoutAdd(x, nil, nil, 0.4, rng, full, start)
	}
	compareResults(t, map[string]*tensor.Tensor{"mask": mask(tensor.NewCPU())},
		map[string]*tensor.Tensor{"mask": mask(tensor.NewDevice(b))}, map[string]bool{"mask": true})
}
