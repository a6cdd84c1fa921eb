package cuda

import (
	"megago/cuda/internal/cublaslt"
	"megago/cuda/internal/dl"
	"megago/cuda/internal/driver"
	"megago/cuda/internal/nccl"
	"megago/cuda/internal/nvrtc"
	"os"
	"testing"
)

// TestGPUReport logs what this machine has: where each library was found (or why not),
// their versions and the devices. It never fails unless MEGAGO_REQUIRE_GPU=1 and there is
// no device; the GPU check script reads its output.
func TestGPUReport(t *testing.T) {
	env := DefaultSearchEnv()
	for _, lib := range []dl.Library{dl.LibDriver, dl.LibCublasLt, dl.LibNVRTC, dl.LibNCCL} {
		path, err := lib.Locate(env)
		if err != nil {
			t.Logf("%-8s missing: %v", lib.Name, err)
			continue
		}
		t.Logf("%-8s %s", lib.Name, path)
	}
	if n, err := nvrtc.Load(env); err == nil {
		major, minor := n.Version()
		archs, _ := n.SupportedArchs()
		t.Logf("NVRTC %d.%d, archs %v", major, minor, archs)
	}
	if c, err := cublaslt.Load(env); err == nil {
		t.Logf("cuBLASLt version %d", c.Version())
	}
	if n, err := nccl.Load(env); err == nil {
		t.Logf("NCCL version %d", n.Version())
	}
	drv, err := driver.Load(env)
	if err != nil {
		if os.Getenv("MEGAGO_REQUIRE_GPU") == "1" {
			t.Fatalf("MEGAGO_REQUIRE_GPU=1: %v", err)
		}
		t.Logf("no GPU: %v", err)
		return
	}
	v, _ := drv.Version()
	n, _ := drv.DeviceCount()
	t.Logf("driver for CUDA %d.%d, %d devices", v/1000, v%1000/10, n)
	for i := range n {
		p, err := drv.DeviceProperties(i)
		if err != nil {
			t.Errorf("device %d: %v", i, err)
			continue
		}
		t.Logf("device %d: %s, sm_%d, %d SMs, %.1f GiB, %d MHz, memory pools %v", i, p.Name, p.Arch(), p.SMs,
			float64(p.TotalMem)/(1<<30), p.ClockKHz/1000, p.MemoryPools)
	}
}
