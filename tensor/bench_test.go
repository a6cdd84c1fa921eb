package tensor

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Kernel benchmarks at the workloads' shapes (see shared/BENCHMARKS.md): W1 is GPT-2 124M
// at 4×64 tokens (C 768, V 50304), W2 a small GPT at 8×256 tokens (C 256, V 8192). Each
// reports GFLOP/s (2·M·N·K per product) or GB/s (bytes read and written); run with -count
// and compare medians. The GEMM peer is OpenBLAS through numpy, in the same run:
//
//	go test ./tensor -run '^$' -bench 'Sgemm$/2048' -count 5
//	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 bench/gemm_peak.py \
//	    --lib numpy --threads 2 --n 2048
//
// GEMM names are M×K×N with NT meaning op(B) = Bᵀ (x·Wᵀ, a Linear's forward), NN its dx
// and TN its dW.

// benchSpan returns an F32 span of the given shape filled with values in [-1, 1).
func benchSpan(r *rand.Rand, shape ...int) Span {
	s := Span{DType: F32, Shape: Shape(shape)}
	s.Buf = cpuBackend{}.Alloc(F32, s.Numel())
	v := raw[float32](s)
	for i := range v {
		v[i] = float32(r.Float64()*2 - 1)
	}
	return s
}

// gemmBench is one product: M×K times K×N (names say M×K×N), with the transposes.
type gemmBench struct {
	name           string
	batch, m, k, n int
	transA, transB bool
	shareB         bool // batch shares one B (StrideB 0)
}

func gemmBenches() []gemmBench {
	return []gemmBench{
		{name: "2048x2048x2048", batch: 1, m: 2048, k: 2048, n: 2048},
		// W1 forward (x·Wᵀ), then its backward: dx = dy·W, dW = dyᵀ·x.
		{name: "W1_qkv_256x768x2304_NT", batch: 1, m: 256, k: 768, n: 2304, transB: true},
		{name: "W1_qkv_dx_256x2304x768_NN", batch: 1, m: 256, k: 2304, n: 768},
		{name: "W1_qkv_dW_2304x256x768_TN", batch: 1, m: 2304, k: 256, n: 768, transA: true},
		{name: "W1_fc2_256x3072x768_NT", batch: 1, m: 256, k: 3072, n: 768, transB: true},
		{name: "W1_fc2_dx_256x768x3072_NN", batch: 1, m: 256, k: 768, n: 3072},
		{name: "W1_fc2_dW_768x256x3072_TN", batch: 1, m: 768, k: 256, n: 3072, transA: true},
		{name: "W1_head_256x768x50304_NT", batch: 1, m: 256, k: 768, n: 50304, transB: true},
		{name: "W1_head_dx_256x50304x768_NN", batch: 1, m: 256, k: 50304, n: 768},
		{name: "W1_head_dW_50304x256x768_TN", batch: 1, m: 50304, k: 256, n: 768, transA: true},
		// W2: fc1 at 2048 tokens and its backward.
		{name: "W2_fc1_2048x256x1024_NT", batch: 1, m: 2048, k: 256, n: 1024, transB: true},
		{name: "W2_fc1_dx_2048x1024x256_NN", batch: 1, m: 2048, k: 1024, n: 256},
		{name: "W2_fc2_dx_2048x256x1024_NN", batch: 1, m: 2048, k: 256, n: 1024},
		{name: "W2_head_dx_2048x8192x256_NN", batch: 1, m: 2048, k: 8192, n: 256},
		{name: "W2_fc1_dW_1024x2048x256_TN", batch: 1, m: 1024, k: 2048, n: 256, transA: true},
		{name: "W2_head_2048x256x8192_NT", batch: 1, m: 2048, k: 256, n: 8192, transB: true},
		// W2's other weight gradients (dyᵀ·x, dy's rows 1-4 KiB apart).
		{name: "W2_qkv_dW_768x2048x256_TN", batch: 1, m: 768, k: 2048, n: 256, transA: true},
		{name: "W2_proj_dW_256x2048x256_TN", batch: 1, m: 256, k: 2048, n: 256, transA: true},
		{name: "W2_fc2_dW_256x2048x1024_TN", batch: 1, m: 256, k: 2048, n: 1024, transA: true},
		{name: "W2_head_dW_8192x2048x256_TN", batch: 1, m: 8192, k: 2048, n: 256, transA: true},
		// Attention, B·NH = 48 heads of HS 64: scores q·kᵀ and context p·v.
		{name: "attn_scores_48x64x64x64_NT", batch: 48, m: 64, k: 64, n: 64, transB: true},
		{name: "attn_ctx_48x64x64x64_NN", batch: 48, m: 64, k: 64, n: 64},
		{name: "attn_scores_48x256x64x256_NT", batch: 48, m: 256, k: 64, n: 256, transB: true},
		{name: "attn_ctx_48x256x256x64_NN", batch: 48, m: 256, k: 256, n: 64},
		{name: "attn_dprobs_48x256x64x256_NT", batch: 48, m: 256, k: 64, n: 256, transB: true},
		{name: "attn_dv_48x256x256x64_TN", batch: 48, m: 256, k: 256, n: 64, transA: true},
	}
}

func BenchmarkSgemm(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, g := range gemmBenches() {
		b.Run(g.name, func(b *testing.B) {
			p := MatMulParams{Batch: g.batch, M: g.m, N: g.n, K: g.k, TransA: g.transA, TransB: g.transB,
				StrideA: g.m * g.k, StrideB: g.k * g.n}
			if g.batch == 1 {
				p.StrideA, p.StrideB = 0, 0
			}
			x := benchSpan(r, g.batch, g.m, g.k)
			w := benchSpan(r, g.batch, g.k, g.n)
			y := benchSpan(r, g.batch, g.m, g.n)
			be := cpuBackend{}
			be.MatMul(y, x, w, p) // warm the pools
			b.ResetTimer()
			for b.Loop() {
				be.MatMul(y, x, w, p)
			}
			flop := 2 * float64(g.batch) * float64(g.m) * float64(g.n) * float64(g.k)
			b.ReportMetric(flop*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkSgemmKernel runs 2048³ and one workload shape on each SIMD kernel.
func BenchmarkSgemmKernel(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 3))
	for _, k := range simdGemmKernels {
		for _, g := range []gemmBench{
			{name: "2048x2048x2048", batch: 1, m: 2048, k: 2048, n: 2048},
			{name: "256x768x2304_NT", batch: 1, m: 256, k: 768, n: 2304, transB: true},
		} {
			b.Run(fmt.Sprintf("%s/%s", k.name, g.name), func(b *testing.B) {
				p := MatMulParams{Batch: 1, M: g.m, N: g.n, K: g.k, TransB: g.transB}
				x, w, y := benchSpan(r, g.m, g.k), benchSpan(r, g.k, g.n), benchSpan(r, g.m, g.n)
				for b.Loop() {
					matmulSIMD(k, y, x, w, p, gemmWorkersFor(p))
				}
				b.ReportMetric(2*float64(g.m*g.n*g.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkSgemmTile runs each micro-kernel on panels that stay in L1: the kernel's peak.
func BenchmarkSgemmTile(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 4))
	for _, k := range simdGemmKernels {
		b.Run(k.name, func(b *testing.B) {
			const kc = 128
			a := raw[float32](benchSpan(r, kc*k.mr))
			bp := raw[float32](benchSpan(r, kc*k.nr))
			c := raw[float32](benchSpan(r, k.mr*k.nr))
			for b.Loop() {
				k.tile(kc, &a[0], &bp[0], &c[0], k.nr, 1)
			}
			b.ReportMetric(2*float64(kc*k.mr*k.nr)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// benchGBs reports the bytes a kernel reads and writes per op as GB/s.
func benchGBs(b *testing.B, bytes float64) {
	b.ReportMetric(bytes*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

// benchIDs returns an I64 span of n ids in [0, v).
func benchIDs(r *rand.Rand, n, v int) Span {
	s := Span{DType: I64, Shape: Shape{n}, Buf: cpuBackend{}.Alloc(I64, n)}
	for i := range raw[int64](s) {
		raw[int64](s)[i] = int64(r.IntN(v))
	}
	return s
}

func BenchmarkGeLU(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 1))
	be := cpuBackend{}
	for _, sh := range [][2]int{{256, 3072}, {2048, 1024}} {
		x, y, dy, dx := benchSpan(r, sh[0], sh[1]), benchSpan(r, sh[0], sh[1]), benchSpan(r, sh[0], sh[1]), benchSpan(r, sh[0], sh[1])
		n := float64(sh[0] * sh[1])
		b.Run(fmt.Sprintf("fwd/%dx%d", sh[0], sh[1]), func(b *testing.B) {
			for b.Loop() {
				be.Unary(OpGeLUTanh, y, x, 0)
			}
			benchGBs(b, 8*n)
		})
		b.Run(fmt.Sprintf("bwd/%dx%d", sh[0], sh[1]), func(b *testing.B) {
			for b.Loop() {
				be.UnaryBackward(OpGeLUTanh, dx, x, y, dy, 0)
			}
			benchGBs(b, 12*n)
		})
	}
}

func BenchmarkBiasAdd(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 2))
	be := cpuBackend{}
	for _, sh := range [][2]int{{256, 3072}, {2048, 1024}} {
		x, bias, y := benchSpan(r, sh[0], sh[1]), benchSpan(r, sh[1]), benchSpan(r, sh[0], sh[1])
		b.Run(fmt.Sprintf("%dx%d", sh[0], sh[1]), func(b *testing.B) {
			for b.Loop() {
				be.Binary(OpAdd, y, x, bias)
			}
			benchGBs(b, 8*float64(sh[0]*sh[1]))
		})
	}
}

func BenchmarkSoftmaxCausal(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 3))
	be := cpuBackend{}
	for _, sh := range [][4]int{{4, 12, 64, 64}, {8, 4, 256, 256}} { // W1, W2: [B, NH, T, T]
		x, y, dy, dx := benchSpan(r, sh[:]...), benchSpan(r, sh[:]...), benchSpan(r, sh[:]...), benchSpan(r, sh[:]...)
		p := SoftmaxParams{Scale: 0.125, Causal: true}
		n := float64(x.Numel())
		name := fmt.Sprintf("%dx%dx%dx%d", sh[0], sh[1], sh[2], sh[3])
		b.Run("fwd/"+name, func(b *testing.B) {
			for b.Loop() {
				be.Softmax(y, x, Span{}, p)
			}
			benchGBs(b, 8*n)
		})
		b.Run("bwd/"+name, func(b *testing.B) {
			for b.Loop() {
				be.SoftmaxBackward(dx, y, dy, p)
			}
			benchGBs(b, 12*n)
		})
	}
}

func BenchmarkLayerNorm(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 4))
	be := cpuBackend{}
	for _, sh := range [][2]int{{256, 768}, {2048, 256}} { // [B·T, C] of W1, W2
		rows, c := sh[0], sh[1]
		x, y, dy, dx := benchSpan(r, rows, c), benchSpan(r, rows, c), benchSpan(r, rows, c), benchSpan(r, rows, c)
		w, bias, dw, db := benchSpan(r, c), benchSpan(r, c), benchSpan(r, c), benchSpan(r, c)
		mean, rstd := benchSpan(r, rows), benchSpan(r, rows)
		n := float64(rows * c)
		name := fmt.Sprintf("%dx%d", rows, c)
		b.Run("fwd/"+name, func(b *testing.B) {
			for b.Loop() {
				be.LayerNorm(y, mean, rstd, x, w, bias, 1e-5)
			}
			benchGBs(b, 8*n)
		})
		b.Run("bwd/"+name, func(b *testing.B) {
			for b.Loop() {
				be.LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd)
			}
			benchGBs(b, 12*n)
		})
	}
}

func BenchmarkCrossEntropy(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 5))
	be := cpuBackend{}
	for _, sh := range [][2]int{{256, 50304}, {2048, 8192}} { // [B·T, Vp] of W1, W2
		rows, v := sh[0], sh[1]
		logits, dlogits := benchSpan(r, rows, v), benchSpan(r, rows, v)
		tgt := benchIDs(r, rows, v)
		loss, lse, dloss := benchSpan(r, rows), benchSpan(r, rows), benchSpan(r, rows)
		p := CrossEntropyParams{}
		be.CrossEntropy(loss, lse, logits, tgt, p)
		n := float64(rows * v)
		name := fmt.Sprintf("%dx%d", rows, v)
		b.Run("fwd/"+name, func(b *testing.B) {
			for b.Loop() {
				be.CrossEntropy(loss, lse, logits, tgt, p)
			}
			benchGBs(b, 4*n)
		})
		b.Run("bwd/"+name, func(b *testing.B) {
			for b.Loop() {
				be.CrossEntropyBackward(dlogits, logits, tgt, lse, dloss, p)
			}
			benchGBs(b, 8*n)
		})
	}
}

func BenchmarkEmbeddingBackward(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 6))
	be := cpuBackend{}
	for _, sh := range [][3]int{{256, 50304, 768}, {2048, 8192, 256}} { // tokens, V, C
		dw, dy, ids := benchSpan(r, sh[1], sh[2]), benchSpan(r, sh[0], sh[2]), benchIDs(r, sh[0], sh[1])
		b.Run(fmt.Sprintf("%dx%d", sh[0], sh[2]), func(b *testing.B) {
			for b.Loop() {
				be.EmbeddingBackward(dw, dy, ids)
			}
			benchGBs(b, 12*float64(sh[0]*sh[2]))
		})
	}
}

// BenchmarkSumSquares measures SumSquares (the gradient-norm pass of Optimizer.Step) over
// a float32 buffer of GPT-2 small's size, in GB/s read.
func BenchmarkSumSquares(b *testing.B) {
	const n = 124_439_808
	dev := NewCPU()
	x := Empty(dev, F32, n)
	xs := raw[float32](x.Span())
	for i := range xs {
		xs[i] = float32(i%1000) * 1e-3
	}
	dst := Empty(dev, F64, 1)
	ranges := [][2]int{{0, n}}
	for b.Loop() {
		cpuBackend{}.SumSquares(dst.Span(), x.Span(), ranges)
	}
	b.ReportMetric(4*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}
