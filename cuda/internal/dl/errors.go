package dl

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNoDevice is wrapped by every error that means "no usable NVIDIA GPU here": a library
// that could not be found or opened, a driver that reports no device, a stub or too old
// driver. Test for it with errors.Is.
var ErrNoDevice = errors.New("cuda: no CUDA device")

// Attempt is one file the library search tried to open, and why it failed.
type Attempt struct {
	Path string
	Err  error
}

// LoadError reports a library that could not be opened: the file names searched for, the
// folders looked in, and each file that existed but failed to open. It wraps ErrNoDevice.
type LoadError struct {
	Library  string    // "NVRTC", "cuBLASLt", ...
	Files    []string  // file names searched for, preferred first
	Dirs     []string  // folders looked in, in order
	Attempts []Attempt // files that exist (or bare names given to the system loader) and failed
	Missing  []string  // symbols missing from an opened library (a library too old)
}

func (e *LoadError) Error() string {
	var b strings.Builder
	if len(e.Missing) > 0 {
		path := ""
		if len(e.Attempts) > 0 {
			path = e.Attempts[len(e.Attempts)-1].Path
		}
		fmt.Fprintf(&b, "cuda: %s at %s lacks %s (library too old?)", e.Library, path, strings.Join(e.Missing, ", "))
		return b.String()
	}
	fmt.Fprintf(&b, "cuda: %s not found: looked for %s", e.Library, strings.Join(e.Files, ", "))
	if len(e.Dirs) > 0 {
		fmt.Fprintf(&b, " in %s", strings.Join(e.Dirs, ", "))
	}
	b.WriteString(" and through the system loader")
	for _, a := range e.Attempts {
		fmt.Fprintf(&b, "; %s: %v", a.Path, a.Err)
	}
	return b.String()
}

// Unwrap returns ErrNoDevice.
func (e *LoadError) Unwrap() error { return ErrNoDevice }

// Error is a failed call into a CUDA library: the library, the function, the numeric
// result and the library's own name and description for it, e.g.
// "cuda: driver: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory".
type Error struct {
	Lib  string // "driver", "NVRTC", "cuBLASLt", "NCCL"
	Func string
	Code int
	Name string // the library's name for Code, when it has one
	Msg  string // the library's description of Code
}

func (e *Error) Error() string {
	s := fmt.Sprintf("cuda: %s: %s: ", e.Lib, e.Func)
	switch {
	case e.Name != "" && e.Msg != "":
		s += fmt.Sprintf("%s (%d): %s", e.Name, e.Code, e.Msg)
	case e.Name != "":
		s += fmt.Sprintf("%s (%d)", e.Name, e.Code)
	case e.Msg != "":
		s += fmt.Sprintf("error %d: %s", e.Code, e.Msg)
	default:
		s += fmt.Sprintf("error %d", e.Code)
	}
	return s
}

// Driver result codes that mean there is no usable device.
const (
	cudaErrorInsufficientDriver = 35
	cudaErrorStubLibrary        = 34
	cudaErrorNoDevice           = 100
	cudaErrorOutOfMemory        = 2
)

// Is reports whether the error means "no usable device" (ErrNoDevice): no device, a
// driver older than the library needs, or the toolkit's stub libcuda.
func (e *Error) Is(target error) bool {
	if target != ErrNoDevice || e.Lib != "driver" {
		return false
	}
	switch e.Code {
	case cudaErrorNoDevice, cudaErrorInsufficientDriver, cudaErrorStubLibrary:
		return true
	}
	return false
}
