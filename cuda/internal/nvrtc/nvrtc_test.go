package nvrtc

import (
	"errors"
	"strings"
	"testing"

	"megago/cuda/internal/dl"
)

func TestNVRTCCompilesAndReportsErrors(t *testing.T) {
	n := LoadOrSkip(t)
	major, minor := n.Version()
	if major < 11 {
		t.Errorf("NVRTC %d.%d, want 11 or newer", major, minor)
	}
	archs, err := n.SupportedArchs()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NVRTC %d.%d at %s, archs %v", major, minor, n.Path(), archs)

	const src = `extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
		int i = blockIdx.x * blockDim.x + threadIdx.x;
		if (i < n) y[i] += a * x[i];
	}`
	ptx, err := n.Compile(src, "axpy.cu", []string{"--gpu-architecture=compute_80"})
	if err != nil {
		t.Fatal(err)
	}
	if s := string(ptx.PTX); !strings.Contains(s, ".entry axpy") || !strings.Contains(s, ".target sm_80") {
		t.Errorf("PTX lacks the entry or target:\n%s", s)
	}
	bin, err := n.Compile(src, "axpy.cu", []string{"--gpu-architecture=sm_80"})
	if err != nil {
		t.Fatal(err)
	}
	if len(bin.CUBIN) < 4 || string(bin.CUBIN[1:4]) != "ELF" {
		t.Errorf("CUBIN is not an ELF image: % x", bin.CUBIN[:min(16, len(bin.CUBIN))])
	}

	_, err = n.Compile(`extern "C" __global__ void k() { undeclared_thing(); }`, "bad.cu", []string{"--gpu-architecture=compute_80"})
	var ce *CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("bad source: error %v, want a *CompileError", err)
	}
	if !strings.Contains(ce.Log, "undeclared_thing") || !strings.Contains(err.Error(), "bad.cu") {
		t.Errorf("compile error does not name the source and the symbol: %v", err)
	}

	_, err = n.Compile(src, "axpy.cu", []string{"--no-such-option"})
	var e *dl.Error
	if !errors.As(err, &e) || e.Lib != "NVRTC" || !strings.Contains(err.Error(), "NVRTC_ERROR_INVALID_OPTION") {
		t.Errorf("bad option: error %v, want an NVRTC *Error naming NVRTC_ERROR_INVALID_OPTION", err)
	}
}
