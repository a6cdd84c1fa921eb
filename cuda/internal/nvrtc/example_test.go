package nvrtc_test

import (
	"errors"
	"fmt"

	"megago/cuda/internal/nvrtc"
)

// A kernel that does not compile comes back as a *CompileError carrying NVRTC's log, the
// source's name and the options, so the caller can print what went wrong where.
func ExampleCompileError() {
	var err error = &nvrtc.CompileError{Name: "gelu.cu", Options: []string{"--gpu-architecture=sm_90"},
		Log: `gelu.cu(3): error: identifier "x" is undefined`}
	var ce *nvrtc.CompileError
	fmt.Println(errors.As(err, &ce), ce.Name)
	fmt.Println(err)
	// Output:
	// true gelu.cu
	// cuda: NVRTC could not compile gelu.cu (--gpu-architecture=sm_90):
	// gelu.cu(3): error: identifier "x" is undefined
}
