package tensor

import "sync/atomic"

// Fused transformer operations. Each is declared once here, in package tensor, with its
// autograd and a documented unfused composition of ordinary ops that defines its result
// (tests compare the two). Every backend implements the kernels behind them: the CPU
// backend with fused loops (attention as a tiled online-softmax kernel that never holds a
// T×T matrix per head), GPU backends with their kernels. Models choose the fused ops when
// they build a layer; the composition stays available as the reference.

// FusedOp names a fused operation, for Device.FusedCount.
type FusedOp uint8

// The fused operations.
const (
	FusedAttention      FusedOp = iota // scaled dot-product attention (Attention)
	FusedAddNorm                       // residual add then LayerNorm or RMSNorm
	FusedBiasGeLU                      // bias add then GeLU
	FusedBiasSwiGLU                    // bias adds then silu(gate)·up
	FusedBiasDropoutAdd                // bias add, dropout, residual add
	FusedRoPE                          // rotary position embedding
	numFusedOps
)

var fusedOpNames = [numFusedOps]string{"attention", "add-norm", "bias-gelu", "bias-swiglu", "bias-dropout-add", "rope"}

// String returns the op's name ("attention", "add-norm", ...).
func (o FusedOp) String() string {
	if o < numFusedOps {
		return fusedOpNames[o]
	}
	return "FusedOp(?)"
}

// fusedCounters counts the forward calls of each fused op on one device.
type fusedCounters [numFusedOps]atomic.Int64

// FusedCount returns how many times op's forward has run on d since d was opened: tests
// use it to show that a model took the fused path.
func (d *Device) FusedCount(op FusedOp) int64 { return d.fused[op].Load() }

// countFused records one forward call of op on d.
func (d *Device) countFused(op FusedOp) { d.fused[op].Add(1) }
