package cuda

import "unsafe"

// CublasLt is cuBLASLt (libcublasLt), opened with LoadCublasLt. Gemm describes one
// matrix product in megago's row-major terms; Plan turns it into cuBLASLt descriptors and
// an algorithm, which Matmul runs.
type CublasLt struct {
	lib     *dynLib
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
	cublasLtMatmul                   func(h, desc uintptr, alpha unsafe.Pointer, a DevicePtr, ad uintptr, b DevicePtr, bd uintptr,
		beta unsafe.Pointer, c DevicePtr, cd uintptr, d DevicePtr, dd uintptr, algo *[8]uint64, ws DevicePtr, wsSize uint64, s Stream) int32
}

// LoadCublasLt opens libcublasLt (see Library.Dirs) and binds it.
func LoadCublasLt(env SearchEnv) (*CublasLt, error) {
	lib, err := LibCublasLt.open(env, dlopen)
	if err != nil {
		return nil, err
	}
	c := &CublasLt{lib: lib}
	b := &binder{lib: lib}
	b.bind(&c.cublasLtCreate, "cublasLtCreate")
	b.bind(&c.cublasLtDestroy, "cublasLtDestroy")
	b.bind(&c.cublasLtGetVersion, "cublasLtGetVersion")
	b.optional(&c.cublasLtGetStatusName, "cublasLtGetStatusName")
	b.optional(&c.cublasLtGetStatusString, "cublasLtGetStatusString")
	b.bind(&c.cublasLtMatmulDescCreate, "cublasLtMatmulDescCreate")
	b.bind(&c.cublasLtMatmulDescDestroy, "cublasLtMatmulDescDestroy")
	b.bind(&c.cublasLtMatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute")
	b.bind(&c.cublasLtMatrixLayoutCreate, "cublasLtMatrixLayoutCreate")
	b.bind(&c.cublasLtMatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy")
	b.bind(&c.cublasLtMatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute")
	b.bind(&c.cublasLtMatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate")
	b.bind(&c.cublasLtMatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy")
	b.bind(&c.cublasLtMatmulPreferenceSetAttr, "cublasLtMatmulPreferenceSetAttribute")
	b.bind(&c.cublasLtMatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic")
	b.bind(&c.cublasLtMatmul, "cublasLtMatmul")
	if err := b.err(LibCublasLt); err != nil {
		return nil, err
	}
	c.version = int(c.cublasLtGetVersion())
	return c, nil
}

// Path returns the file cuBLASLt was opened from.
func (c *CublasLt) Path() string { return c.lib.path }

// Version returns cuBLASLt's version, e.g. 120304 for 12.3.4.
func (c *CublasLt) Version() int { return c.version }

// cublasStatusNames names cuBLAS status codes for libraries without cublasLtGetStatusName.
var cublasStatusNames = map[int32]string{
	1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED", 7: "CUBLAS_STATUS_INVALID_VALUE",
	8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR", 13: "CUBLAS_STATUS_EXECUTION_FAILED",
	14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR",
}

func (c *CublasLt) check(fn string, s int32) error {
	if s == 0 {
		return nil
	}
	e := &Error{Lib: "cuBLASLt", Func: fn, Code: int(s), Name: cublasStatusNames[s]}
	if c.cublasLtGetStatusName != nil {
		e.Name = c.cublasLtGetStatusName(s)
	}
	if c.cublasLtGetStatusString != nil {
		e.Msg = c.cublasLtGetStatusString(s)
	}
	return e
}

// LtHandle is a cuBLASLt context, bound to the device current when it was created.
type LtHandle uintptr

// NewHandle creates a cuBLASLt handle on the current context.
func (c *CublasLt) NewHandle() (LtHandle, error) {
	var h uintptr
	err := c.check("cublasLtCreate", c.cublasLtCreate(&h))
	return LtHandle(h), err
}

// DestroyHandle destroys h.
func (c *CublasLt) DestroyHandle(h LtHandle) error {
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
