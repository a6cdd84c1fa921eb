package nvrtc

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"megago/cuda/internal/dl"
)

// NVRTC is the runtime compiler of CUDA C (libnvrtc), opened with Load. It needs no
// GPU: kernels can be compiled on any machine that has the library.
type NVRTC struct {
	lib          *dl.Lib
	major, minor int

	nvrtcVersion            func(major, minor *int32) int32
	nvrtcGetErrorString     func(r int32) string
	nvrtcCreateProgram      func(p *uintptr, src, name string, nh int32, headers, names unsafe.Pointer) int32
	nvrtcDestroyProgram     func(p *uintptr) int32
	nvrtcCompileProgram     func(p uintptr, nopt int32, opts unsafe.Pointer) int32
	nvrtcGetProgramLogSize  func(p uintptr, n *uint64) int32
	nvrtcGetProgramLog      func(p uintptr, log *byte) int32
	nvrtcGetPTXSize         func(p uintptr, n *uint64) int32
	nvrtcGetPTX             func(p uintptr, ptx *byte) int32
	nvrtcGetCUBINSize       func(p uintptr, n *uint64) int32 // NVRTC ≥ 11.1
	nvrtcGetCUBIN           func(p uintptr, cubin *byte) int32
	nvrtcGetNumSupportedArc func(n *int32) int32 // NVRTC ≥ 11.2
	nvrtcGetSupportedArchs  func(archs *int32) int32
}

// nvrtcErrorCompilation is NVRTC_ERROR_COMPILATION.
const nvrtcErrorCompilation = 6

// Load opens libnvrtc (see dl.Library.Dirs) and binds it.
func Load(env dl.SearchEnv) (*NVRTC, error) {
	lib, err := dl.LibNVRTC.Open(env)
	if err != nil {
		return nil, err
	}
	n := &NVRTC{lib: lib}
	b := dl.NewBinder(lib)
	b.Bind(&n.nvrtcVersion, "nvrtcVersion")
	b.Bind(&n.nvrtcGetErrorString, "nvrtcGetErrorString")
	b.Bind(&n.nvrtcCreateProgram, "nvrtcCreateProgram")
	b.Bind(&n.nvrtcDestroyProgram, "nvrtcDestroyProgram")
	b.Bind(&n.nvrtcCompileProgram, "nvrtcCompileProgram")
	b.Bind(&n.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize")
	b.Bind(&n.nvrtcGetProgramLog, "nvrtcGetProgramLog")
	b.Bind(&n.nvrtcGetPTXSize, "nvrtcGetPTXSize")
	b.Bind(&n.nvrtcGetPTX, "nvrtcGetPTX")
	b.Optional(&n.nvrtcGetCUBINSize, "nvrtcGetCUBINSize")
	b.Optional(&n.nvrtcGetCUBIN, "nvrtcGetCUBIN")
	b.Optional(&n.nvrtcGetNumSupportedArc, "nvrtcGetNumSupportedArchs")
	b.Optional(&n.nvrtcGetSupportedArchs, "nvrtcGetSupportedArchs")
	if err := b.Err(dl.LibNVRTC); err != nil {
		return nil, err
	}
	var major, minor int32
	if err := n.check("nvrtcVersion", n.nvrtcVersion(&major, &minor)); err != nil {
		return nil, err
	}
	n.major, n.minor = int(major), int(minor)
	return n, nil
}

func (n *NVRTC) check(fn string, r int32) error {
	if r == 0 {
		return nil
	}
	return &dl.Error{Lib: "NVRTC", Func: fn, Code: int(r), Msg: n.nvrtcGetErrorString(r)}
}

// Path returns the file NVRTC was opened from.
func (n *NVRTC) Path() string { return n.lib.Path() }

// Version returns NVRTC's CUDA version, e.g. 11, 8.
func (n *NVRTC) Version() (major, minor int) { return n.major, n.minor }

// SupportedArchs returns the sm_XX numbers NVRTC compiles for (nil for NVRTC < 11.2).
func (n *NVRTC) SupportedArchs() ([]int, error) {
	if n.nvrtcGetNumSupportedArc == nil || n.nvrtcGetSupportedArchs == nil {
		return nil, nil
	}
	var k int32
	if err := n.check("nvrtcGetNumSupportedArchs", n.nvrtcGetNumSupportedArc(&k)); err != nil {
		return nil, err
	}
	if k == 0 {
		return nil, nil
	}
	a := make([]int32, k)
	if err := n.check("nvrtcGetSupportedArchs", n.nvrtcGetSupportedArchs(&a[0])); err != nil {
		return nil, err
	}
	out := make([]int, k)
	for i, v := range a {
		out[i] = int(v)
	}
	return out, nil
}

// CompileError is a kernel source that NVRTC rejected, with its log.
type CompileError struct {
	Name    string   // the source's name
	Options []string // the options it was compiled with
	Log     string
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("cuda: NVRTC could not compile %s (%s):\n%s", e.Name, strings.Join(e.Options, " "), e.Log)
}

// Compiled is the output of a compilation.
type Compiled struct {
	PTX   []byte // for a virtual architecture (compute_XX)
	CUBIN []byte // for a real one (sm_XX), when NVRTC can emit it
	Log   string // warnings
}

// Compile compiles CUDA C source src (its name is used in messages) with options such as
// "--gpu-architecture=sm_90". For a real architecture (sm_XX) it returns the CUBIN, for a
// virtual one (compute_XX) the PTX. A source that does not compile is a *CompileError.
func (n *NVRTC) Compile(src, name string, options []string) (Compiled, error) {
	var prog uintptr
	if err := n.check("nvrtcCreateProgram", n.nvrtcCreateProgram(&prog, src, name, 0, nil, nil)); err != nil {
		return Compiled{}, err
	}
	defer n.nvrtcDestroyProgram(&prog)
	opts, keep := cStrings(options)
	var optp unsafe.Pointer
	if len(opts) > 0 {
		optp = unsafe.Pointer(&opts[0])
	}
	r := n.nvrtcCompileProgram(prog, int32(len(options)), optp)
	runtime.KeepAlive(keep)
	runtime.KeepAlive(opts)
	log, lerr := n.programBytes(prog, "nvrtcGetProgramLog", n.nvrtcGetProgramLogSize, n.nvrtcGetProgramLog)
	if lerr != nil {
		return Compiled{}, lerr
	}
	logs := strings.TrimRight(string(log), "\x00\n ")
	if r == nvrtcErrorCompilation {
		return Compiled{}, &CompileError{Name: name, Options: options, Log: logs}
	}
	if err := n.check("nvrtcCompileProgram", r); err != nil {
		return Compiled{}, err
	}
	out := Compiled{Log: logs}
	real := false
	for _, o := range options {
		real = real || strings.Contains(o, "sm_")
	}
	var err error
	if real && n.nvrtcGetCUBIN != nil {
		out.CUBIN, err = n.programBytes(prog, "nvrtcGetCUBIN", n.nvrtcGetCUBINSize, n.nvrtcGetCUBIN)
	} else {
		out.PTX, err = n.programBytes(prog, "nvrtcGetPTX", n.nvrtcGetPTXSize, n.nvrtcGetPTX)
	}
	return out, err
}

// programBytes reads one of a program's outputs through its size and copy functions.
func (n *NVRTC) programBytes(prog uintptr, fn string, size func(uintptr, *uint64) int32, get func(uintptr, *byte) int32) ([]byte, error) {
	var k uint64
	if err := n.check(fn+"Size", size(prog, &k)); err != nil {
		return nil, err
	}
	if k == 0 {
		return nil, nil
	}
	buf := make([]byte, k)
	if err := n.check(fn, get(prog, &buf[0])); err != nil {
		return nil, err
	}
	return buf, nil
}

// cStrings returns an array of pointers to NUL-terminated copies of ss, and the copies,
// which must be kept alive while C reads them.
func cStrings(ss []string) ([]*byte, [][]byte) {
	ptrs := make([]*byte, len(ss))
	keep := make([][]byte, len(ss))
	for i, s := range ss {
		keep[i] = append([]byte(s), 0)
		ptrs[i] = &keep[i][0]
	}
	return ptrs, keep
}

// LoadOrSkip returns NVRTC for a test, skipping the test when it is missing, unless
// MEGAGO_REQUIRE_NVRTC=1 (CI installs it), when it fails instead.
func LoadOrSkip(tb testing.TB) *NVRTC {
	tb.Helper()
	n, err := Load(dl.DefaultSearchEnv())
	if err != nil {
		if os.Getenv("MEGAGO_REQUIRE_NVRTC") == "1" {
			tb.Fatalf("MEGAGO_REQUIRE_NVRTC=1 but NVRTC did not load: %v", err)
		}
		tb.Skipf("needs NVRTC (Debian's libnvrtc11.2 or a CUDA toolkit): %v", err)
	}
	return n
}
