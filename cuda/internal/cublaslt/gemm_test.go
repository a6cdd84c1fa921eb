package cublaslt

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"megago/cuda/internal/driver"
)

// colMajorGemm is the BLAS definition of the call cuBLASLt receives: D = op(A)·op(B) with
// column-major storage (element (i, j) of a rows×cols matrix at i + j·ld), for each batch.
func colMajorGemm(c ltCall, a, b []float64) []float64 {
	d := make([]float64, int(c.batch)*int(c.d.stride+0)+int(c.d.ld)*c.n)
	at := func(l ltLayout, m []float64, op int32, bi, i, j int) float64 {
		if op == 1 {
			i, j = j, i
		}
		return m[int64(bi)*l.stride+int64(i)+int64(j)*l.ld]
	}
	for bi := 0; bi < int(c.batch); bi++ {
		for i := 0; i < c.m; i++ {
			for j := 0; j < c.n; j++ {
				var s float64
				for k := 0; k < c.k; k++ {
					s += at(c.a, a, c.opA, bi, i, k) * at(c.b, b, c.opB, bi, k, j)
				}
				d[int64(bi)*c.d.stride+int64(i)+int64(j)*c.d.ld] = s
			}
		}
	}
	return d
}

// rowMajorGemm is megago's definition (tensor.MatMulParams): D[i] = op(A[i])·op(B[i]).
func rowMajorGemm(g Gemm, a, b []float64) []float64 {
	ld := func(ld, n int) int {
		if ld == 0 {
			return n
		}
		return ld
	}
	lda, ldb, ldd := ld(g.LDA, map[bool]int{false: g.K, true: g.M}[g.TransA]), ld(g.LDB, map[bool]int{false: g.N, true: g.K}[g.TransB]), ld(g.LDD, g.N)
	batch := max(1, g.Batch)
	d := make([]float64, batch*int(g.StrideD)+ldd*g.M)
	for bi := 0; bi < batch; bi++ {
		for i := 0; i < g.M; i++ {
			for j := 0; j < g.N; j++ {
				var s float64
				for k := 0; k < g.K; k++ {
					av := a[bi*int(g.StrideA)+i*lda+k]
					if g.TransA {
						av = a[bi*int(g.StrideA)+k*lda+i]
					}
					bv := b[bi*int(g.StrideB)+k*ldb+j]
					if g.TransB {
						bv = b[bi*int(g.StrideB)+j*ldb+k]
					}
					s += av * bv
				}
				d[bi*int(g.StrideD)+i*ldd+j] = s
			}
		}
	}
	return d
}

// TestGemmColumnMajorMapping checks that the column-major call built for a row-major Gemm
// (swapped operands, transposes, leading dims, batch strides) computes the same product.
func TestGemmColumnMajorMapping(t *testing.T) {
	cases := []Gemm{
		{M: 3, N: 4, K: 5},
		{M: 3, N: 4, K: 5, TransA: true},
		{M: 3, N: 4, K: 5, TransB: true},
		{M: 3, N: 4, K: 5, TransA: true, TransB: true},
		{M: 2, N: 3, K: 4, LDA: 6, LDB: 5, LDD: 7},
		{M: 2, N: 3, K: 4, TransA: true, TransB: true, LDA: 3, LDB: 9},
		{M: 3, N: 2, K: 4, Batch: 3, StrideA: 12, StrideB: 8, StrideD: 6},
		{M: 3, N: 2, K: 4, Batch: 3, StrideA: 0, StrideB: 8, StrideD: 6, TransB: true}, // one A for every batch
		{M: 1, N: 1, K: 7, Batch: 2, StrideA: 7, StrideB: 7, StrideD: 1, TransA: true},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, g := range cases {
		t.Run(fmt.Sprintf("%+v", g), func(t *testing.T) {
			a, b := make([]float64, 200), make([]float64, 200)
			for i := range a {
				a[i], b[i] = float64(r.IntN(9)-4), float64(r.IntN(9)-4)
			}
			c := g.colMajor()
			// cuBLAS's A is megago's B.
			got := colMajorGemm(c, b, a)
			want := rowMajorGemm(g, a, b)
			ldd := g.LDD
			if ldd == 0 {
				ldd = g.N
			}
			for bi := 0; bi < max(1, g.Batch); bi++ {
				for i := 0; i < g.M; i++ {
					for j := 0; j < g.N; j++ {
						at := bi*int(g.StrideD) + i*ldd + j
						if got[at] != want[at] {
							t.Fatalf("batch %d D[%d,%d] = %v, want %v", bi, i, j, got[at], want[at])
						}
					}
				}
			}
		})
	}
}

func TestGemmPanicsOnBadSizes(t *testing.T) {
	for _, g := range []Gemm{{M: 0, N: 1, K: 1}, {M: 2, N: 3, K: 4, LDA: 3}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%+v did not panic", g)
				}
			}()
			g.colMajor()
		}()
	}
}

func TestAlignment(t *testing.T) {
	for _, c := range []struct {
		p    driver.DevicePtr
		want uint32
	}{{0x10000, 256}, {0x10002, 2}, {0x10040, 64}, {0x10004, 4}, {0x10001, 1}} {
		if got := alignment(c.p); got != c.want {
			t.Errorf("alignment(%#x) = %d, want %d", c.p, got, c.want)
		}
	}
}
