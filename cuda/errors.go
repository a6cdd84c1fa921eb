package cuda

import (
	"megago/cuda/internal/dl"
	"megago/cuda/internal/driver"
	"megago/cuda/internal/kernels"
	"megago/cuda/internal/nvrtc"
)

// The errors, device description and library search of the bindings in cuda/internal,
// under the names users of the backend see.

// ErrNoDevice is wrapped by every error that means "no usable NVIDIA GPU here": a library
// that could not be found or opened, a driver that reports no device, a stub or too old
// driver. Test for it with errors.Is.
var ErrNoDevice = dl.ErrNoDevice

// Error is a failed call into a CUDA library: the library, the function, the numeric
// result and the library's own name and description for it, e.g.
// "cuda: driver: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory". An Error of
// the driver meaning "no device" (no device, a driver too old, the toolkit's stub
// libcuda) matches ErrNoDevice under errors.Is.
type Error = dl.Error

// LoadError reports a library that could not be opened: the file names searched for
// (Files), the folders looked in (Dirs), each file that existed but failed to open and
// why (Attempts), or the symbols an opened library lacks (Missing: a library too old).
// It wraps ErrNoDevice.
type LoadError = dl.LoadError

// CompileError is a kernel source that NVRTC rejected, with its log.
type CompileError = nvrtc.CompileError

// Properties describes a device: its name, compute capability (Major, Minor; Arch()
// gives 90 for sm_90), multiprocessors, memory, limits and driver version.
type Properties = driver.Properties

// SearchEnv is what the search for the CUDA libraries looks at: environment variables
// (Getenv), the file system (Glob, Exists) and the architecture (GOARCH). The zero value
// in Config means DefaultSearchEnv().
//
// Each library is looked for under the file names of CUDA 13, 12 and 11, newest first, in
// EnvLibDirs, CUDA_HOME (and CUDA_PATH, CUDA_ROOT), LD_LIBRARY_PATH, the nvidia/*/lib
// folders of Python wheels, the system's folders and finally through the system loader.
type SearchEnv = dl.SearchEnv

// DefaultSearchEnv returns the process's environment and file system.
func DefaultSearchEnv() SearchEnv { return dl.DefaultSearchEnv() }

// EnvLibDirs is the environment variable holding extra folders (separated by ':') that are
// searched for the CUDA libraries before any other.
const EnvLibDirs = dl.EnvLibDirs

// DefaultCacheDir returns where compiled kernels are cached: os.UserCacheDir()/megago/cuda,
// or "" (no disk cache) when the system has no cache folder.
func DefaultCacheDir() string { return kernels.DefaultCacheDir() }
