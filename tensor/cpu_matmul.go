package tensor

// MatMul computes F64 products with matmulRef and F32, BF16 and F16 products in float32
// with the fastest SIMD kernel the CPU has (gemm.go), or with matmulRef on CPUs without one.
func (cpuBackend) MatMul(dst, a, b Span, p MatMulParams) {
	if computeIs64(dst.DType) {
		matmulRef[float64](dst, a, b, p)
		return
	}
	kern := defaultGemmKernel()
	if kern == nil {
		matmulRef[float32](dst, a, b, p)
		return
	}
	matmulSIMD(kern, dst, a, b, p, gemmWorkersFor(p))
}

// simdGemmKernels lists the SIMD kernels this CPU runs, fastest first (a table fixed at
// init from the CPU's features).
var simdGemmKernels = gemmKernels()

// defaultGemmKernel returns the fastest SIMD kernel of this CPU, or nil.
func defaultGemmKernel() *gemmKernel {
	if len(simdGemmKernels) > 0 {
		return simdGemmKernels[0]
	}
	return nil
}

// matmulSIMD is MatMul in float32 with kernel kern on up to workers goroutines.
func matmulSIMD(kern *gemmKernel, dst, a, b Span, p MatMulParams, workers int) {
	as, bs := load[float32](a), load[float32](b)
	var ds []float32
	if p.Accumulate {
		ds = load[float32](dst)
	} else {
		ds = output[float32](dst)
	}
	sgemm(kern, ds, as, bs, p, workers)
	store(dst, ds)
}

// matmulRef is the portable reference GEMM, which states MatMul's semantics: op(A) is
// packed row-major, then each output row is built either as a sum of scaled rows of B (B
// not transposed) or as dot products with rows of B (B transposed). Rows are split across
// goroutines; each output element's sum runs over k in increasing order, so results do not
// depend on the number of goroutines.
func matmulRef[T float](dst, a, b Span, p MatMulParams) {
	as, bs := load[T](a), load[T](b)
	var ds []T
	if p.Accumulate {
		ds = load[T](dst)
	} else {
		ds = output[T](dst)
	}
	M, N, K := p.M, p.N, p.K
	rows := p.Batch * M
	parallelFor(rows, max(1, 4096/max(1, N*K/64)), func(lo, hi int) {
		arow := make([]T, K)
		for r := lo; r < hi; r++ {
			bi, i := r/M, r%M
			matmulRefRow(ds[r*N:(r+1)*N], as[bi*p.StrideA:], bs[bi*p.StrideB:], arow, i, &p)
		}
	})
	store(dst, ds)
}

// matmulRefRow computes row i of one matrix product of matmulRef, out (N elements), from
// that matrix's operands A and B, packing op(A)'s row into arow (K elements).
func matmulRefRow[T float](out, A, B, arow []T, i int, p *MatMulParams) {
	M, N, K := p.M, p.N, p.K
	if p.TransA { // A is K×M
		for k := 0; k < K; k++ {
			arow[k] = A[k*M+i]
		}
	} else {
		copy(arow, A[i*K:(i+1)*K])
	}
	out = out[:N]
	if !p.Accumulate {
		clear(out)
	}
	if p.TransB { // B is N×K
		for j := range out {
			brow := B[j*K : (j+1)*K]
			var s T
			for k, x := range arow {
				s += x * brow[k]
			}
			out[j] += s
		}
		return
	}
	for k, x := range arow {
		brow := B[k*N : (k+1)*N]
		for j := range out {
			out[j] += x * brow[j]
		}
	}
}
