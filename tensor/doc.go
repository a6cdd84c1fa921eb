// Package tensor is megago's foundation: n-dimensional tensors on a device, a reverse-mode
// autograd engine, the Backend interface that devices implement, the portable CPU backend,
// memory scopes and a random generator whose values do not depend on the parallel layout.
//
// # Reading order
//
//   - dtype.go, shape.go, half.go: DType (F64, F32, BF16, F16, I32, I64), Shape and NumPy
//     broadcasting, exact bfloat16/binary16 conversions (round to nearest, ties to even).
//   - backend.go: Backend, the kernels a device implements, and Span, what a kernel sees of
//     a tensor. Backends register by name (Register, Open) like database/sql drivers.
//   - device.go: Device (a backend plus a caching pool, a stack of scopes and the gradient
//     mode), Scope, PoolStats.
//   - tensor.go: Tensor, creation (Zeros, Ones, Full, FromSlice, Arange, Scalar), export
//     (ToSlice, Item), To another device.
//   - autograd.go, function.go: the graph, Backward, BackwardWithGrad, custom differentiable
//     functions (Function, Apply) and activation recomputation (Checkpoint);
//     grad_hook.go: SetGradHook, called when a backward pass has finished a leaf's
//     gradient (data-parallel reduction overlapping backward).
//   - ops_*.go: the ops, each with its backward; cpu*.go: the CPU kernels (cpu_ce.go:
//     the vocabulary-parallel cross entropy, with its work split and precision notes).
//   - rng.go: RNG (Philox-4x32-10 keys), Region, Random and its distributions.
//   - fused.go: the fused transformer ops, each declared with its unfused reference
//     (a composition of ordinary ops that defines its result), and Device.FusedCount;
//     fused_attention.go: Attention (causal and padding masks, additive bias, dropout,
//     grouped-query heads, the log-sum-exp; document masks from per-token segment ids,
//     attention_segments.go, whose tiles the CPU kernel skips when they share no
//     segment) and AttentionReference, with
//     cpu_attention*.go its tiled online-softmax CPU kernels, which never hold a [Tq, Tk]
//     matrix per head; fused_norm.go, fused_act.go, fused_dropout.go, fused_rope.go:
//     AddLayerNorm, AddRMSNorm, BiasGeLU, BiasSwiGLU, BiasDropoutAdd and RoPE, one pass
//     over memory each (cpu_fused_rows*.go), with their *Reference compositions. Every
//     backend implements their kernels (AttentionKernels, RowKernels in Backend).
//     Optional kernels save a layer's layout copies where a backend has them (the CPU
//     does), else the ops compose: fused_heads.go's SplitHeads (a fused QKV projection
//     plus bias into heads, HeadKernels) and attention_merged.go's AttentionMerged (the
//     output with the heads side by side, MergedAttentionKernels).
//
// # Layout and views
//
// A tensor's elements are always contiguous in row-major order. Reshape (and Unsqueeze,
// Squeeze) and Narrow along a dim preceded only by size-1 dims are views that share
// storage; Permute, Transpose, Narrow on an inner dim, Concat, Expand and Cast copy.
// Contiguous returns its receiver. Activations are laid out [B, T, C].
//
// # Autograd
//
// Ops record a node when gradient recording is on for the device (see Device.NoGrad) and
// an input requires grad: leaves are marked with SetRequiresGrad. Backward (for a scalar),
// BackwardWithGrad (for a pipeline stage's output) and Backward (several outputs) add
// gradients into leaves' Grad, so calls accumulate until ZeroGrad. The graph behind the
// outputs is freed as backward passes it; running backward through it again panics.
// Backward runs with recording off (no higher-order gradients). ZeroGrad defers its zeros:
// the next gradient is stored rather than added, and Grad writes the zeros if none came.
// MatMul and Embedding write the gradient of a leaf weight straight into its Grad (a GEMM
// that accumulates, a scatter-add) instead of through a temporary.
//
// # Memory
//
// Storage comes from the device's pool. Tensors created while a Scope is open belong to
// the innermost one and go back to the pool when it closes; a training step inside a scope
// therefore reuses the same storage every step (PoolStats.Fresh stops growing). A leaf's
// gradient belongs to the leaf's own scope: parameters and optimizer state are created
// outside scopes, so their gradients are too, while a pipeline stage's input and its
// gradient go back to the pool with the micro-batch's scope. Checkpoint runs its segment
// in a scope of its own and holds only the outputs. Scopes whose lifetimes overlap
// without nesting (a pipeline's micro-batches) are Suspended between their forward and
// backward passes and Resumed for the backward (scope_suspend.go). Keep moves a tensor
// to the enclosing scope; Release frees it early. Using a released tensor panics. A
// backward pass returns each intermediate gradient to the pool as soon as it has been used
// (grad_temps.go), so gradients passed to a Function's Backward are valid only during the
// call. A Device is not meant to be shared by goroutines that open scopes: give each rank
// its own.
//
// # Numerics
//
// The CPU backend computes F64 and integer tensors in float64 and F32, BF16 and F16
// tensors in float32 (narrow types are widened, computed, and rounded back); row
// reductions (sums, softmax, norms, cross entropy) accumulate in float64. Work is split
// across goroutines only between independent outputs (rows, tiles of a matrix product,
// aligned blocks of elements) or fixed blocks of a row whose partial sums are combined
// in a fixed order, so results are identical whatever GOMAXPROCS is. The portable Go
// kernels state the semantics; on amd64, float32 MatMul runs on AVX-512 or AVX2
// micro-kernels (gemm.go) and the float32 GeLU, softmax, LayerNorm and cross-entropy
// loops are vectorised with AVX-512 (vmath.go, vmath_ce.go). These agree with the
// portable kernels within float32 rounding, not bitwise, so results can differ in the
// last bits between CPUs with different SIMD features. The vocabulary-parallel cross
// entropy evaluates its float32 exponentials in float32 (sums still in float64).
//
// GroupedMatMul (grouped_matmul.go) is a mixture of experts' product: rows of x [T, K]
// grouped by expert in order, counts[e] rows for expert e, each group times its expert's
// matrix of w [E, K, N]. A backend implementing GroupedMatMulKernels computes it in one
// call; others get one MatMul per expert. The CPU backend runs the SGEMM driver over
// bands of rows of all experts in one fork (groupedSgemm), so small groups leave no core
// idle; each row equals MatMul of that row alone, bit for bit (a row of the GEMM does not
// depend on M). At W4's shapes (4096 routed rows, C 256, 8 experts of hidden 512) it
// measured 0.91-0.97 times a dense SGEMM (medians of 5) of equal FLOPs, uniform and skewed counts alike
// (BenchmarkGroupedMatMul).
//
// # Randomness
//
// RNG is a Philox key derived from a seed and coordinates (Fold, Named); the value of an
// element depends only on the key and the element's index in the full, unsharded tensor
// (Region). Weight init and dropout masks are therefore the same at every TP/PP/DP layout
// and on every backend, and recomputation replays dropout exactly.
//
// # Errors
//
// Caller bugs (mismatched shapes or dtypes, dims out of range, ids out of range) panic
// with the op and the shapes, e.g. "tensor: MatMul: [2 3] x [4 5] (transA=false,
// transB=false): inner dims differ (3 vs 4)". Each op's doc says "It panics if ..." for
// its own conditions. A device error on an asynchronous backend (a GPU) panics with an
// error value at the next Device.Sync or host copy (see Backend). Nothing in this package
// does I/O.
package tensor
