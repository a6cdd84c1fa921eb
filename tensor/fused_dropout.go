package tensor

// BiasDropoutAdd returns residual + DropoutRegion(x + bias, p, rng, full, start) for x
// [..., C] in one pass: the end of a transformer sub-block (hidden dropout, then the
// residual add). x holds the region of a full tensor of shape full that starts at start,
// and its mask is DropoutRegion's for the same rng, full and start, element for element,
// so a sharded layer drops what the unsharded one drops. bias ([C]) and residual (x's
// shape) may be nil; p = 0 (or evaluation, where callers pass 0) drops nothing. Kept
// elements are scaled by 1/(1−p) in the compute type: for F32 and F64 the value
// DropoutRegion's mask holds; for BF16 and F16, whose reference mask holds 1/(1−p) rounded
// to the dtype, its float32 value, as the CUDA kernel uses. The backward draws the mask
// again rather than keeping it. The result is defined by
// BiasDropoutAddReference. It panics if p is outside [0, 1), the region does not hold x,
// or the operands' dtypes, devices or shapes do not match.
func BiasDropoutAdd(x, bias, residual *Tensor, p float64, rng RNG, full Shape, start []int) *Tensor {
	checkRows("BiasDropoutAdd", x, []*Tensor{residual}, []*Tensor{bias})
	checkDropout("BiasDropoutAdd", x, p, full, start)
	dev := x.Device()
	dev.countFused(FusedBiasDropoutAdd)
	dp := DropoutParams{P: p, Key: rng.key, Full: full.Clone(), Start: append([]int(nil), start...)}
	y := empty(dev, x.dtype, x.shape)
	dev.backend.BiasDropoutResidual(y.Span(), x.Span(), spanOrEmpty(bias), spanOrEmpty(residual), dp)
	return record1("BiasDropoutAdd", y, []*Tensor{x, bias, residual}, func(gy *Tensor) []*Tensor {
		var dx, db *Tensor
		switch {
		case p == 0: // dx = gy: pass it on (as Add does) and sum only the bias's columns
			if needsGrad(x) {
				dx = gy
			}
			if db = gradFor(bias); db != nil {
				dev.backend.BiasDropoutBackward(Span{}, db.Span(), gy.Span(), dp)
			}
		case needsGrad(x) || needsGrad(bias):
			dx, db = empty(dev, x.dtype, x.shape), gradFor(bias)
			dev.backend.BiasDropoutBackward(dx.Span(), spanOrEmpty(db), gy.Span(), dp)
		}
		return []*Tensor{dx, db, gy}
	})
}

// BiasDropoutAddReference is BiasDropoutAdd's unfused composition, which defines its
// result: Add(residual, DropoutRegion(Add(x, bias), p, rng, full, start)), without an Add
// whose operand is nil.
func BiasDropoutAddReference(x, bias, residual *Tensor, p float64, rng RNG, full Shape, start []int) *Tensor {
	h := x
	if bias != nil {
		h = Add(x, bias)
	}
	h = DropoutRegion(h, p, rng, full, start)
	if residual != nil {
		h = Add(residual, h)
	}
	return h
}
