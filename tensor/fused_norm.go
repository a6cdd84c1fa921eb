package tensor

// AddLayerNorm returns y = LayerNorm(sum, w, b, eps) and sum = x + residual, in one pass
// over the rows of x [..., C]: the residual add and the norm that follows it in a
// transformer layer (pre-LN: sum is the residual stream the next block adds to, y the next
// block's input; post-LN: y is the layer's output). Both outputs are differentiable, and
// x and residual get the same gradient, norm'(dy) + dsum. residual may be nil: then sum is
// x itself and y = LayerNorm(x). w and b ([C]) may be nil. The result is defined by
// AddLayerNormReference. It panics if the operands' dtypes, devices or shapes differ.
func AddLayerNorm(x, residual, w, b *Tensor, eps float64) (y, sum *Tensor) {
	return addNorm("AddLayerNorm", x, residual, w, b, NormParams{Eps: eps})
}

// AddRMSNorm is AddLayerNorm with RMSNorm: y = RMSNorm(sum, w, eps), sum = x + residual.
// The result is defined by AddRMSNormReference.
func AddRMSNorm(x, residual, w *Tensor, eps float64) (y, sum *Tensor) {
	return addNorm("AddRMSNorm", x, residual, w, nil, NormParams{Eps: eps, RMS: true})
}

// AddLayerNormReference is AddLayerNorm's unfused composition, which defines its result:
// sum = Add(x, residual) (x when residual is nil), y = LayerNorm(sum, w, b, eps).
func AddLayerNormReference(x, residual, w, b *Tensor, eps float64) (y, sum *Tensor) {
	sum = x
	if residual != nil {
		sum = Add(x, residual)
	}
	return LayerNorm(sum, w, b, eps), sum
}

// AddRMSNormReference is AddRMSNorm's unfused composition: sum = Add(x, residual) (x when
// residual is nil), y = RMSNorm(sum, w, eps).
func AddRMSNormReference(x, residual, w *Tensor, eps float64) (y, sum *Tensor) {
	sum = x
	if residual != nil {
		sum = Add(x, residual)
	}
	return RMSNorm(sum, w, eps), sum
}

func addNorm(op string, x, residual, w, b *Tensor, p NormParams) (y, sum *Tensor) {
	checkRows(op, x, []*Tensor{residual}, []*Tensor{w, b})
	dev := x.Device()
	dev.countFused(FusedAddNorm)
	rows := x.Numel() / max(1, x.shape[len(x.shape)-1])
	y = empty(dev, x.dtype, x.shape)
	sum = x
	if residual != nil {
		sum = empty(dev, x.dtype, x.shape)
	}
	var mean *Tensor
	if !p.RMS {
		mean = empty(dev, normStatsType(x.dtype), Shape{rows})
	}
	rstd := empty(dev, normStatsType(x.dtype), Shape{rows})
	var sumSpan Span
	if residual != nil {
		sumSpan = sum.Span()
	}
	dev.backend.ResidualNorm(y.Span(), sumSpan, spanOrEmpty(mean), rstd.Span(), x.Span(), spanOrEmpty(residual),
		spanOrEmpty(w), spanOrEmpty(b), p)
	s := sum.Detach() // the normalized input, kept for the backward
	backward := func(gys []*Tensor) []*Tensor {
		var dsum Span
		if len(gys) > 1 {
			dsum = gys[1].Span()
		}
		dx, dw, db := empty(dev, x.dtype, x.shape), gradFor(w), gradFor(b)
		dev.backend.ResidualNormBackward(dx.Span(), spanOrEmpty(dw), spanOrEmpty(db), gys[0].Span(), dsum,
			s.Span(), spanOrEmpty(w), spanOrEmpty(mean), rstd.Span(), p)
		dres := dx
		if residual == nil {
			dres = nil
		}
		return []*Tensor{dx, dres, dw, db}
	}
	if residual == nil { // sum is x itself, not an output of this op
		record(op, []*Tensor{y}, []*Tensor{x, nil, w, b}, backward)
		return y, sum
	}
	record(op, []*Tensor{y, sum}, []*Tensor{x, residual, w, b}, backward)
	return y, sum
}
