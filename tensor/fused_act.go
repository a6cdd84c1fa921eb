package tensor

import "fmt"

// BiasGeLU returns GeLU(x + bias) for x [..., C] in one pass: form OpGeLUTanh is the tanh
// approximation of GPT-2 and Megatron (GeLU), OpGeLUErf the exact form of BERT (GeLUErf).
// bias ([C]) may be nil. The backward recomputes x + bias instead of keeping it. The result
// is defined by BiasGeLUReference. It panics if form is another op or the operands'
// dtypes, devices or shapes do not match.
func BiasGeLU(x, bias *Tensor, form UnaryOp) *Tensor {
	checkGeLUForm("BiasGeLU", form)
	checkRows("BiasGeLU", x, nil, []*Tensor{bias})
	dev := x.Device()
	dev.countFused(FusedBiasGeLU)
	y := empty(dev, x.dtype, x.shape)
	dev.backend.BiasActivation(form, y.Span(), x.Span(), spanOrEmpty(bias))
	return record1("BiasGeLU", y, []*Tensor{x, bias}, func(gy *Tensor) []*Tensor {
		dx, db := empty(dev, x.dtype, x.shape), gradFor(bias)
		dev.backend.BiasActivationBackward(form, dx.Span(), spanOrEmpty(db), gy.Span(), x.Span(), spanOrEmpty(bias))
		return []*Tensor{dx, db}
	})
}

// BiasGeLUReference is BiasGeLU's unfused composition, which defines its result:
// GeLU(Add(x, bias)) or GeLUErf(Add(x, bias)), without the Add when bias is nil.
func BiasGeLUReference(x, bias *Tensor, form UnaryOp) *Tensor {
	checkGeLUForm("BiasGeLUReference", form)
	h := x
	if bias != nil {
		h = Add(x, bias)
	}
	if form == OpGeLUErf {
		return GeLUErf(h)
	}
	return GeLU(h)
}

func checkGeLUForm(op string, form UnaryOp) {
	if form != OpGeLUTanh && form != OpGeLUErf {
		panic(fmt.Sprintf("tensor: %s: form %d is neither OpGeLUTanh nor OpGeLUErf", op, form))
	}
}

// BiasSwiGLU returns silu(gate + gateBias)·(up + upBias) for gate and up [..., F] in one
// pass: Llama's SwiGLU activation of the MLP's gate and up projections. The biases ([F])
// may be nil. The result is defined by BiasSwiGLUReference. It panics if the operands'
// dtypes, devices or shapes do not match.
func BiasSwiGLU(gate, up, gateBias, upBias *Tensor) *Tensor {
	checkRows("BiasSwiGLU", gate, []*Tensor{up}, []*Tensor{gateBias, upBias})
	dev := gate.Device()
	dev.countFused(FusedBiasSwiGLU)
	y := empty(dev, gate.dtype, gate.shape)
	dev.backend.SwiGLU(y.Span(), gate.Span(), up.Span(), spanOrEmpty(gateBias), spanOrEmpty(upBias))
	return record1("BiasSwiGLU", y, []*Tensor{gate, up, gateBias, upBias}, func(gy *Tensor) []*Tensor {
		dg, du := empty(dev, gate.dtype, gate.shape), empty(dev, up.dtype, up.shape)
		dgb, dub := gradFor(gateBias), gradFor(upBias)
		dev.backend.SwiGLUBackward(dg.Span(), du.Span(), spanOrEmpty(dgb), spanOrEmpty(dub), gy.Span(),
			gate.Span(), up.Span(), spanOrEmpty(gateBias), spanOrEmpty(upBias))
		return []*Tensor{dg, du, dgb, dub}
	})
}

// BiasSwiGLUReference is BiasSwiGLU's unfused composition, which defines its result:
// Mul(SiLU(Add(gate, gateBias)), Add(up, upBias)), without an Add whose bias is nil.
func BiasSwiGLUReference(gate, up, gateBias, upBias *Tensor) *Tensor {
	if gateBias != nil {
		gate = Add(gate, gateBias)
	}
	if upBias != nil {
		up = Add(up, upBias)
	}
	return Mul(SiLU(gate), up)
}
