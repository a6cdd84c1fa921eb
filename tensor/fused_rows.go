package tensor

import (
	"fmt"
	"math"
)

// The row-wise fused ops of a transformer layer: residual add with LayerNorm or RMSNorm
// (AddLayerNorm, AddRMSNorm), bias add with GeLU or SwiGLU (BiasGeLU, BiasSwiGLU), bias
// add with dropout and residual add (BiasDropoutAdd), and rotary position embedding
// (RoPE). Each makes one pass over memory in its forward and one in its backward, where
// the unfused composition (the ...Reference functions, which define the results) writes
// and reads back an intermediate per op; the backward recomputes what is cheap (x + bias,
// the dropout mask) instead of keeping it. Their kernels are the RowKernels of a Backend.
//
// Numerics (CPU backend): F32 and F64 compute as the reference's ops do, element by
// element, so results agree with the reference's to within a float32 (float64) rounding
// or two per element; column sums (weight and bias gradients) are accumulated in float64
// over fixed blocks of rows, so they do not depend on the number of threads. BF16 and F16
// follow DType.Compute: operands are widened to float32, the op is computed as for F32,
// and each output is rounded once (the reference rounds every intermediate).

// NormParams configures the ResidualNorm kernels.
type NormParams struct {
	Eps float64
	RMS bool // RMSNorm: no mean is subtracted and there is no bias
}

// DropoutParams describes the dropout of the BiasDropout kernels. The span x the kernel
// sees is the region of a full tensor of shape Full (of x's rank) that starts at Start,
// as in Region; element e of x is dropped when the generator's uniform draw for its index
// in the full tensor is below P (DistDropout's rule, so the mask is the one
// DropoutRegion draws for the same key, full shape and start), and kept elements are
// multiplied by 1/(1−P) in the compute type (DType.Compute). P = 0 drops nothing and
// draws nothing.
type DropoutParams struct {
	P     float64
	Key   [2]uint32 // Philox key, from RNG.Key
	Full  Shape
	Start []int
}

// RoPEParams describes a rotary position embedding of x [..., T, HS] (HS even): the pair
// (x[j], x[j+HS/2]) of the row of token t is rotated by the angle
// Positions[t]·Theta^(−2j/HS), j < HS/2, as Hugging Face Llama's rotate_half does.
// Inverse rotates by the opposite angle (the backward).
type RoPEParams struct {
	Positions []int // [T]
	Theta     float64
	Inverse   bool
}

// RowKernels are the kernels behind the row-wise fused ops. Spans are contiguous; "rows"
// is the product of all dims but the last, C the last dim; bias and weight spans are [C].
// Optional spans (said so below) may be empty. Column sums (dw, db, dbias) are set, not
// accumulated.
type RowKernels interface {
	// ResidualNorm sets sum = x + residual and y = norm(sum), or y = norm(x) when residual
	// is empty (sum is then empty too), writing each row's mean (LayerNorm only; empty for
	// RMSNorm) and rstd (the compute type of x, [rows]). norm is LayerNorm with weight w and
	// bias b, both optional, or with p.RMS, RMSNorm with weight w (b is empty). For BF16 and
	// F16 the norm is of sum rounded to the dtype.
	ResidualNorm(y, sum, mean, rstd, x, residual, w, b Span, p NormParams)
	// ResidualNormBackward sets dx = norm'(dy) + dsum, the gradient of x and of residual,
	// for the normalized input s (sum, or x without residual); dsum, dw and db are
	// optional (db is empty with RMS).
	ResidualNormBackward(dx, dw, db, dy, dsum, s, w, mean, rstd Span, p NormParams)

	// BiasActivation sets y = act(x + bias) for act OpGeLUTanh or OpGeLUErf; bias is
	// optional.
	BiasActivation(act UnaryOp, y, x, bias Span)
	// BiasActivationBackward sets dx = dy·act'(x + bias) and, when dbias is not empty, its
	// column sums into dbias.
	BiasActivationBackward(act UnaryOp, dx, dbias, dy, x, bias Span)

	// SwiGLU sets y = silu(gate + gateBias)·(up + upBias); the biases are optional.
	SwiGLU(y, gate, up, gateBias, upBias Span)
	// SwiGLUBackward sets dgate and dup and, when not empty, their column sums into
	// dgateBias and dupBias.
	SwiGLUBackward(dgate, dup, dgateBias, dupBias, dy, gate, up, gateBias, upBias Span)

	// BiasDropoutResidual sets y = residual + dropout(x + bias); bias and residual are
	// optional.
	BiasDropoutResidual(y, x, bias, residual Span, p DropoutParams)
	// BiasDropoutBackward sets dx = dy·mask, with the mask drawn again from p, and, when
	// dbias is not empty, its column sums into dbias. When p.P is 0, dx may be empty: then
	// it sets only dbias, to dy's column sums.
	BiasDropoutBackward(dx, dbias, dy Span, p DropoutParams)

	// RotaryEmbedding sets y = RoPE(x) for x [..., T, HS]; y may be x.
	RotaryEmbedding(y, x Span, p RoPEParams)
}

// checkRows panics unless every tensor in ts is nil or on x's device with x's dtype and,
// for those in full, x's shape, or, for those in vec, shape [C] (x's last dim).
func checkRows(op string, x *Tensor, full, vec []*Tensor) {
	if len(x.shape) == 0 || !x.dtype.IsFloat() {
		panic(fmt.Sprintf("tensor: %s: input %v %v must be a float tensor with at least one dim", op, x.dtype, x.shape))
	}
	c := x.shape[len(x.shape)-1]
	for i, t := range append(full, vec...) {
		if t == nil {
			continue
		}
		checkSame(op, x, t)
		if i < len(full) && !t.shape.Equal(x.shape) {
			panic(fmt.Sprintf("tensor: %s: operand %v for input %v: shapes differ", op, t.shape, x.shape))
		}
		if i >= len(full) && (len(t.shape) != 1 || t.shape[0] != c) {
			panic(fmt.Sprintf("tensor: %s: vector %v for input %v: want [%d]", op, t.shape, x.shape, c))
		}
	}
}

// gradFor returns storage for t's gradient (contents undefined) when t needs one, else
// nil.
func gradFor(t *Tensor) *Tensor {
	if !needsGrad(t) {
		return nil
	}
	return empty(t.Device(), t.dtype, t.shape)
}

// checkDropout panics unless p is in [0, 1) and x is the region of full at start.
func checkDropout(op string, x *Tensor, p float64, full Shape, start []int) {
	if p < 0 || p >= 1 || math.IsNaN(p) {
		panic(fmt.Sprintf("tensor: %s: probability %v outside [0, 1)", op, p))
	}
	Region{Full: full, Start: start, Size: x.shape}.check(op)
}
