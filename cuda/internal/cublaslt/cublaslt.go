package cublaslt

import (
	"unsafe"

	"megago/cuda/internal/dl"
	"megago/cuda/internal/driver"
)

// Lib is cuBLASLt (libcublasLt), opened with Load. Gemm describes one matrix product in
// megago's row-major terms; a Runner turns it into cuBLASLt descriptors and an algorithm
// and runs it.
type Lib struct {
	lib     *dl.Lib
	version int

	cublasLtCreate                   func(h *uintptr) int32
	cublasLtDestroy                  func(h uintptr) int32
	cublasLtGetVersion               func() uint64
	cublasLtGetStatusName            func(s int32) string // cuBLAS ≥ 11.4
	cublasLtGetStatusString          func(s int32) string
	cublasLtMatmulDescCreate         func(d *uintptr, compute, scale int32) int32
	cublasLtMatmulDescDestroy        func(d uintptr) int32
	cublasLtMatmulDescSetAttribute   func(d uintptr, attr int32, buf unsafe.Pointer, size uint64) int32
	cublasLtMatrixLayoutCreate       func(l *uintptr, dt int32, rows, cols uint64, ld int64) int32
	cublasLtMatrixLayoutDestroy      func(l uintptr) int32
	cublasLtMatrixLayoutSetAttribute func(l uintptr, attr int32, buf unsafe.Pointer, size uint64) int32
	cublasLtMatmulPreferenceCreate   func(p *uintptr) int32
	cublasLtMatmulPreferenceDestroy  func(p uintptr) int32
	cublasLtMatmulPreferenceSetAttr  func(p uintptr, attr int32, buf unsafe.Pointer, size uint64) int32
	cublasLtMatmulAlgoGetHeuristic   func(h, desc, a, b, c, d, pref uintptr, n int32, res *heuristicResult, got *int32) int32
	cublasLtMatmul                   func(h, desc uintptr, alpha unsafe.Pointer, a driver.DevicePtr, ad uintptr, b driver.DevicePtr, bd uintptr,
		beta unsafe.Pointer, c driver.DevicePtr, cd uintptr, d driver.DevicePtr, dd uintptr, algo *[8]uint64, ws driver.DevicePtr, wsSize uint64, s driver.Stream) int32
}

// Load opens libcublasLt (see dl.Library.Dirs) and binds it.
func Load(env dl.SearchEnv) (*Lib, error) {
	lib, err := dl.LibCublasLt.Open(env)
	if err != nil {
		return nil, err
	}
	c := &Lib{lib: lib}
	b := dl.NewBinder(lib)
	b.Bind(&c.cublasLtCreate, "cublasLtCreate")
	b.Bind(&c.cublasLtDestroy, "cublasLtDestroy")
	b.Bind(&c.cublasLtGetVersion, "cublasLtGetVersion")
	b.Optional(&c.cublasLtGetStatusName, "cublasLtGetStatusName")
	b.Optional(&c.cublasLtGetStatusString, "cublasLtGetStatusString")
	b.Bind(&c.cublasLtMatmulDescCreate, "cublasLtMatmulDescCreate")
	b.Bind(&c.cublasLtMatmulDescDestroy, "cublasLtMatmulDescDestroy")
	b.Bind(&c.cublasLtMatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute")
	b.Bind(&c.cublasLtMatrixLayoutCreate, "cublasLtMatrixLayoutCreate")
	b.Bind(&c.cublasLtMatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy")
	b.Bind(&c.cublasLtMatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute")
	b.Bind(&c.cublasLtMatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate")
	b.Bind(&c.cublasLtMatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy")
	b.Bind(&c.cublasLtMatmulPreferenceSetAttr, "cublasLtMatmulPreferenceSetAttribute")
	b.Bind(&c.cublasLtMatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic")
	b.Bind(&c.cublasLtMatmul, "cublasLtMatmul")
	if err := b.Err(dl.LibCublasLt); err != nil {
		return nil, err
	}
	c.version = int(c.cublasLtGetVersion())
	return c, nil
}

// Path returns the file cuBLASLt was opened from.
func (c *Lib) Path() string { return c.lib.Path() }

// Version returns cuBLASLt's version, e.g. 120304 for 12.3.4.
func (c *Lib) Version() int { return c.version }

// cublasStatusNames names cuBLAS status codes for libraries without cublasLtGetStatusName.
var cublasStatusNames = map[int32]string{
	1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED", 7: "CUBLAS_STATUS_INVALID_VALUE",
	8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR", 13: "CUBLAS_STATUS_EXECUTION_FAILED",
	14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR",
}

func (c *Lib) check(fn string, s int32) error {
	if s == 0 {
		return nil
	}
	e := &dl.Error{Lib: "cuBLASLt", Func: fn, Code: int(s), Name: cublasStatusNames[s]}
	if c.cublasLtGetStatusName != nil {
		e.Name = c.cublasLtGetStatusName(s)
	}
	if c.cublasLtGetStatusString != nil {
		e.Msg = c.cublasLtGetStatusString(s)
	}
	return e
}

// Handle is a cuBLASLt context, bound to the device current when it was created.
type Handle uintptr

// NewHandle creates a cuBLASLt handle on the current context.
func (c *Lib) NewHandle() (Handle, error) {
	var h uintptr
	err := c.check("cublasLtCreate", c.cublasLtCreate(&h))
	return Handle(h), err
}

// DestroyHandle destroys h.
func (c *Lib) DestroyHandle(h Handle) error {
	return c.check("cublasLtDestroy", c.cublasLtDestroy(uintptr(h)))
}

// Epilogue is what cuBLASLt applies to the product before storing D (cublasLtEpilogue_t).
// In megago's row-major terms the bias has one element per column of D (an output
// feature), and bias gradients are sums over D's rows (tokens).
type Epilogue uint32

// Epilogues.
const (
	EpilogueDefault     Epilogue = 1   // D = αAB + βC
	EpilogueBias        Epilogue = 4   // + bias
	EpilogueGeLU        Epilogue = 32  // gelu(·) (tanh approximation)
	EpilogueGeLUBias    Epilogue = 36  // gelu(· + bias)
	EpilogueGeLUAux     Epilogue = 160 // gelu(·), and the input of gelu stored in Aux
	EpilogueGeLUAuxBias Epilogue = 164 // gelu(· + bias), and its input stored in Aux
	EpilogueDGeLU       Epilogue = 192 // D = product · gelu'(Aux)
	EpilogueDGeLUBGrad  Epilogue = 208 // as DGeLU, and Bias = the column sums of D
	EpilogueBGradA      Epilogue = 256 // Bias = the sums of op(B)'s rows over K (see Gemm)
	EpilogueBGradB      Epilogue = 512 // Bias = the sums of op(A)'s columns over K (see Gemm)
)

// DataType is a cudaDataType_t.
type DataType int32

// Data types.
const (
	TypeF32  DataType = 0
	TypeF64  DataType = 1
	TypeF16  DataType = 2
	TypeBF16 DataType = 14
	TypeI32  DataType = 10
)

// cuBLAS compute types (cublasComputeType_t).
const (
	compute32F         = 68
	compute32FFastTF32 = 77
	compute64F         = 70
)
