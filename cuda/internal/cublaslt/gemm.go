package cublaslt

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"megago/cuda/internal/dl"
	"megago/cuda/internal/driver"
)

// Gemm describes D = α·op(A)·op(B) (+ D when Accumulate) for Batch matrices, in
// megago's row-major terms: op(A) is M×K, op(B) is K×N, D is M×N. A is stored M×K (K×M
// when TransA) with rows LDA elements apart (0: tight), likewise B (K×N, or N×K when
// TransB) and D. Batch i of each matrix starts Stride elements after batch i−1 (0
// repeats one matrix). All matrices have Type; F32 multiplies in float32 (TF32 tensor
// cores when AllowTF32), BF16 and F16 accumulate in float32, F64 in float64.
//
// Epilogues work on D's columns (output features): EpilogueBias adds Bias[j] to column j;
// the GeLU epilogues store gelu's input in Aux (M×N, rows AuxLD apart); EpilogueDGeLUBGrad
// writes Bias[j] = Σ_i D[i,j]. EpilogueBGradA writes Bias[j] = Σ_k op(B)[k,j] (N values)
// and EpilogueBGradB writes Bias[i] = Σ_k op(A)[i,k] (M values): for a linear layer's
// weight gradient dW = dYᵀ·X (A = dY with TransA, K = tokens), EpilogueBGradB gives the
// bias gradient Σ_t dY[t, :] in the same pass.
type Gemm struct {
	Type                      DataType
	M, N, K                   int
	TransA, TransB            bool
	LDA, LDB, LDD             int
	Batch                     int // 0 means 1
	StrideA, StrideB, StrideD int64
	Epilogue                  Epilogue // 0 means EpilogueDefault
	AuxLD                     int64    // 0 means N
	AllowTF32                 bool
	Accumulate                bool // D += product (β = 1)
}

// ltLayout is one cuBLASLt matrix layout: rows×cols in column-major order, ld apart.
type ltLayout struct {
	rows, cols uint64
	ld         int64
	stride     int64
}

// ltCall is a Gemm as the column-major cuBLASLt call that computes it: Dᵀ = op(B)ᵀ·op(A)ᵀ,
// so cuBLAS's A is megago's B and the other way round.
type ltCall struct {
	m, n, k   int // cuBLAS's: m = N, n = M
	opA, opB  int32
	a, b, d   ltLayout
	batch     int32
	epilogue  Epilogue
	auxLD     int64
	auxStride int64
}

// colMajor maps g to the cuBLASLt call. It panics on sizes that cannot describe a
// product.
func (g Gemm) colMajor() ltCall {
	if g.M <= 0 || g.N <= 0 || g.K <= 0 {
		panic(fmt.Sprintf("cuda: Gemm: M=%d N=%d K=%d", g.M, g.N, g.K))
	}
	tight := func(ld, n int) int64 {
		if ld == 0 {
			return int64(n)
		}
		if ld < n {
			panic(fmt.Sprintf("cuda: Gemm: leading dim %d < %d", ld, n))
		}
		return int64(ld)
	}
	c := ltCall{m: g.N, n: g.M, k: g.K, batch: int32(max(1, g.Batch))}
	// cuBLAS A = megago B: stored row-major K×N (N×K when TransB) = column-major N×K (K×N).
	if g.TransB {
		c.opA, c.a = 1, ltLayout{rows: uint64(g.K), cols: uint64(g.N), ld: tight(g.LDB, g.K)}
	} else {
		c.a = ltLayout{rows: uint64(g.N), cols: uint64(g.K), ld: tight(g.LDB, g.N)}
	}
	// cuBLAS B = megago A: stored row-major M×K (K×M when TransA) = column-major K×M (M×K).
	if g.TransA {
		c.opB, c.b = 1, ltLayout{rows: uint64(g.M), cols: uint64(g.K), ld: tight(g.LDA, g.M)}
	} else {
		c.b = ltLayout{rows: uint64(g.K), cols: uint64(g.M), ld: tight(g.LDA, g.K)}
	}
	c.d = ltLayout{rows: uint64(g.N), cols: uint64(g.M), ld: tight(g.LDD, g.N)}
	c.a.stride, c.b.stride, c.d.stride = g.StrideB, g.StrideA, g.StrideD
	// cuBLAS's epilogues are defined on its D (N×M column-major = megago's D), its A
	// (megago's op(B)ᵀ) and its B (megago's op(A)ᵀ): BGRADA sums over K along cuBLAS A's
	// rows, which are megago's op(B) columns, so no renaming is needed.
	c.epilogue = g.Epilogue
	if c.epilogue == 0 {
		c.epilogue = EpilogueDefault
	}
	c.auxLD = g.AuxLD
	if c.auxLD == 0 {
		c.auxLD = int64(g.N)
	}
	c.auxStride = c.auxLD * int64(g.M)
	return c
}

// cuBLASLt attribute numbers (cublasLtMatmulDescAttributes_t, ...LayoutAttribute_t,
// ...PreferenceAttributes_t).
const (
	descTransA        = 3
	descTransB        = 4
	descEpilogue      = 7
	descBiasPointer   = 8
	descAuxPointer    = 11
	descAuxLD         = 12
	descAuxBatch      = 13
	layoutBatchCount  = 5
	layoutBatchStride = 6
	prefMaxWorkspace  = 1
	prefAlignA        = 5 // ..D = 8
)

// planKey is what an algorithm choice depends on: the product and the alignment of the
// pointers (cuBLASLt's kernels assume the alignment they were chosen for).
type planKey struct {
	g                      Gemm
	alignA, alignB, alignD uint32 // of cuBLAS's A, B, D, in bytes (≤ 256)
}

// ltPlan is a Gemm's descriptors and chosen algorithm.
type ltPlan struct {
	call       ltCall
	desc       uintptr
	a, b, d    uintptr // layouts; C uses d's
	algo       [8]uint64
	workspace  uint64
	typeSize   int
	scale64bit bool
}

// heuristicResult is cublasLtMatmulHeuristicResult_t.
type heuristicResult struct {
	algo      [8]uint64
	workspace uint64
	state     int32
	waves     float32
	reserved  [4]int32
}

// Runner runs Gemms on one cuBLASLt handle with a workspace, caching a plan per
// distinct product. It is safe for concurrent use.
type Runner struct {
	lt        *Lib
	h         Handle
	workspace driver.DevicePtr
	wsBytes   int64

	mu    sync.Mutex
	plans map[planKey]*ltPlan
}

// NewRunner returns a runner on handle h with a workspace of wsBytes at ws.
func (c *Lib) NewRunner(h Handle, ws driver.DevicePtr, wsBytes int64) *Runner {
	return &Runner{lt: c, h: h, workspace: ws, wsBytes: wsBytes, plans: map[planKey]*ltPlan{}}
}

// alignment returns the largest power of two up to 256 dividing p.
func alignment(p driver.DevicePtr) uint32 {
	a := uint32(256)
	for a > 1 && uintptr(p)%uintptr(a) != 0 {
		a /= 2
	}
	return a
}

func typeSize(t DataType) int {
	switch t {
	case TypeF64:
		return 8
	case TypeF16, TypeBF16:
		return 2
	}
	return 4
}

// plan returns the cached plan for g at these pointers' alignment, creating it.
func (r *Runner) plan(g Gemm, a, b, d, bias, aux driver.DevicePtr) (*ltPlan, error) {
	k := planKey{g: g, alignA: alignment(b), alignB: alignment(a), alignD: alignment(d)}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.plans[k]; ok {
		return p, nil
	}
	p, err := r.newPlan(k, bias, aux)
	if err != nil {
		return nil, err
	}
	r.plans[k] = p
	return p, nil
}

func (r *Runner) newPlan(k planKey, bias, aux driver.DevicePtr) (*ltPlan, error) {
	lt, g := r.lt, k.g
	c := g.colMajor()
	p := &ltPlan{call: c, typeSize: typeSize(g.Type)}
	compute, scale := int32(compute32F), int32(TypeF32)
	switch {
	case g.Type == TypeF64:
		compute, scale, p.scale64bit = compute64F, int32(TypeF64), true
	case g.Type == TypeF32 && g.AllowTF32:
		compute = compute32FFastTF32
	}
	if err := lt.check("cublasLtMatmulDescCreate", lt.cublasLtMatmulDescCreate(&p.desc, compute, scale)); err != nil {
		return nil, err
	}
	set := func(attr int32, v unsafe.Pointer, size uint64) error {
		return lt.check("cublasLtMatmulDescSetAttribute", lt.cublasLtMatmulDescSetAttribute(p.desc, attr, v, size))
	}
	epi := uint32(c.epilogue)
	errs := []error{
		set(descTransA, unsafe.Pointer(&c.opA), 4),
		set(descTransB, unsafe.Pointer(&c.opB), 4),
		set(descEpilogue, unsafe.Pointer(&epi), 4),
	}
	if c.epilogue != EpilogueDefault {
		errs = append(errs, p.setPointers(lt, bias, aux))
	}
	if needsAux(c.epilogue) {
		errs = append(errs, set(descAuxLD, unsafe.Pointer(&c.auxLD), 8), set(descAuxBatch, unsafe.Pointer(&c.auxStride), 8))
	}
	for _, l := range []struct {
		dst *uintptr
		l   ltLayout
	}{{&p.a, c.a}, {&p.b, c.b}, {&p.d, c.d}} {
		errs = append(errs, lt.layout(l.dst, int32(g.Type), l.l, c.batch))
	}
	for _, err := range errs {
		if err != nil {
			p.destroy(lt)
			return nil, err
		}
	}
	if err := r.chooseAlgo(p, k); err != nil {
		p.destroy(lt)
		return nil, err
	}
	return p, nil
}

func needsAux(e Epilogue) bool {
	return e == EpilogueGeLUAux || e == EpilogueGeLUAuxBias || e == EpilogueDGeLU || e == EpilogueDGeLUBGrad
}

// setPointers sets the bias and aux pointers of p's descriptor.
func (p *ltPlan) setPointers(lt *Lib, bias, aux driver.DevicePtr) error {
	if err := lt.check("cublasLtMatmulDescSetAttribute", lt.cublasLtMatmulDescSetAttribute(p.desc, descBiasPointer, unsafe.Pointer(&bias), 8)); err != nil {
		return err
	}
	if !needsAux(p.call.epilogue) {
		return nil
	}
	return lt.check("cublasLtMatmulDescSetAttribute", lt.cublasLtMatmulDescSetAttribute(p.desc, descAuxPointer, unsafe.Pointer(&aux), 8))
}

// layout creates a matrix layout with its batch attributes.
func (lt *Lib) layout(dst *uintptr, dt int32, l ltLayout, batch int32) error {
	if err := lt.check("cublasLtMatrixLayoutCreate", lt.cublasLtMatrixLayoutCreate(dst, dt, l.rows, l.cols, l.ld)); err != nil {
		return err
	}
	if batch <= 1 {
		return nil
	}
	if err := lt.check("cublasLtMatrixLayoutSetAttribute", lt.cublasLtMatrixLayoutSetAttribute(*dst, layoutBatchCount, unsafe.Pointer(&batch), 4)); err != nil {
		return err
	}
	return lt.check("cublasLtMatrixLayoutSetAttribute", lt.cublasLtMatrixLayoutSetAttribute(*dst, layoutBatchStride, unsafe.Pointer(&l.stride), 8))
}

// chooseAlgo asks the heuristic for the best algorithm within the workspace.
func (r *Runner) chooseAlgo(p *ltPlan, k planKey) error {
	lt := r.lt
	var pref uintptr
	if err := lt.check("cublasLtMatmulPreferenceCreate", lt.cublasLtMatmulPreferenceCreate(&pref)); err != nil {
		return err
	}
	defer lt.cublasLtMatmulPreferenceDestroy(pref)
	ws := uint64(r.wsBytes)
	if err := lt.check("cublasLtMatmulPreferenceSetAttribute", lt.cublasLtMatmulPreferenceSetAttr(pref, prefMaxWorkspace, unsafe.Pointer(&ws), 8)); err != nil {
		return err
	}
	for i, a := range []uint32{k.alignA, k.alignB, k.alignD, k.alignD} { // A, B, C (= D), D
		if err := lt.check("cublasLtMatmulPreferenceSetAttribute", lt.cublasLtMatmulPreferenceSetAttr(pref, int32(prefAlignA+i), unsafe.Pointer(&a), 4)); err != nil {
			return err
		}
	}
	var res heuristicResult
	var got int32
	st := lt.cublasLtMatmulAlgoGetHeuristic(uintptr(r.h), p.desc, p.a, p.b, p.d, p.d, pref, 1, &res, &got)
	if err := lt.check("cublasLtMatmulAlgoGetHeuristic", st); err != nil {
		return err
	}
	if got == 0 {
		return &dl.Error{Lib: "cuBLASLt", Func: "cublasLtMatmulAlgoGetHeuristic", Code: 15, Name: "CUBLAS_STATUS_NOT_SUPPORTED",
			Msg: fmt.Sprintf("no algorithm for %+v", k.g)}
	}
	p.algo, p.workspace = res.algo, res.workspace
	return nil
}

func (p *ltPlan) destroy(lt *Lib) {
	for _, l := range []uintptr{p.a, p.b, p.d} {
		if l != 0 {
			lt.cublasLtMatrixLayoutDestroy(l)
		}
	}
	if p.desc != 0 {
		lt.cublasLtMatmulDescDestroy(p.desc)
	}
}

// Run queues g on s: D = alpha·op(A)·op(B) (+ D when g.Accumulate), with the epilogue's
// bias and aux pointers (0 when unused).
func (r *Runner) Run(g Gemm, alpha float64, a, b, d, bias, aux driver.DevicePtr, s driver.Stream) error {
	p, err := r.plan(g, a, b, d, bias, aux)
	if err != nil {
		return err
	}
	r.mu.Lock() // the descriptor's pointers are shared state of the cached plan
	defer r.mu.Unlock()
	if p.call.epilogue != EpilogueDefault {
		if err := p.setPointers(r.lt, bias, aux); err != nil {
			return err
		}
	}
	beta := 0.0
	if g.Accumulate {
		beta = 1
	}
	a32, b32 := float32(alpha), float32(beta)
	al, be := unsafe.Pointer(&a32), unsafe.Pointer(&b32)
	if p.scale64bit {
		al, be = unsafe.Pointer(&alpha), unsafe.Pointer(&beta)
	}
	// cuBLAS's A is megago's B and the other way round (see ltCall).
	st := r.lt.cublasLtMatmul(uintptr(r.h), p.desc, al, b, p.a, a, p.b, be, d, p.d, d, p.d, &p.algo, r.workspace, uint64(r.wsBytes), s)
	runtime.KeepAlive(a32)
	runtime.KeepAlive(b32)
	return r.lt.check("cublasLtMatmul", st)
}

// Close destroys the cached plans (not the handle or the workspace).
func (r *Runner) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, p := range r.plans {
		p.destroy(r.lt)
		delete(r.plans, k)
	}
}
