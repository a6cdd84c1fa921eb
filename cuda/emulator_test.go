package cuda

import (
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"

	"megago/tensor"
)

// The kernel emulator (emulator.go, internal/emu): with MEGAGO_CUDA_EMU=1 every GPU test
// runs on it, and a failed build fails the tests instead of skipping them.

// openEmulatedBackend returns a backend on the emulator when MEGAGO_CUDA_EMU=1, else
// nil. It fails the test when the emulator cannot be built (the error quotes g++).
func openEmulatedBackend(t *testing.T) *Backend {
	t.Helper()
	if !emulated(DefaultSearchEnv()) {
		return nil
	}
	b, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// requireEmulator returns a backend on the emulator, or skips the test without
// MEGAGO_CUDA_EMU=1.
func requireEmulator(t *testing.T) *Backend {
	t.Helper()
	b := openEmulatedBackend(t)
	if b == nil {
		t.Skipf("needs the kernel emulator: %s=1 and g++", EnvEmulator)
	}
	return b
}

// emulatorEnv returns the default search environment with MEGAGO_CUDA_EMU=1.
func emulatorEnv() SearchEnv {
	env := DefaultSearchEnv()
	env.Getenv = func(k string) string {
		if k == EnvEmulator {
			return "1"
		}
		return os.Getenv(k)
	}
	return env
}

// TestEmulatorBuildFailureIsAnError opens the emulator with an empty cache and no g++ on
// the PATH: Open must return an error saying what is missing (never a nil backend, never
// a panic).
func TestEmulatorBuildFailureIsAnError(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	b, err := Open(Config{CacheDir: t.TempDir(), Search: emulatorEnv()})
	if err == nil {
		b.Close()
		t.Fatal("Open built the emulator without g++")
	}
	for _, want := range []string{EnvEmulator, "g++"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

// TestEmulatorConcurrentBackends runs ops on two emulator backends from two goroutines
// at once: launches share the emulator's statics, so they must be serialised, and the
// results must still equal the CPU's.
func TestEmulatorConcurrentBackends(t *testing.T) {
	requireEmulator(t)
	cases := elementwiseCases()[:1] // matmul in F32 and its backward: kernels and GEMMs
	want := make([]map[string]*tensor.Tensor, len(cases))
	seed := func(i int) hostInputs { return hostInputs{rand.New(rand.NewPCG(7, uint64(i)))} }
	for i, c := range cases {
		want[i] = c.run(tensor.NewCPU(), seed(i))
	}
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := Open(Config{Search: emulatorEnv()})
			if err != nil {
				t.Errorf("goroutine %d: %v", g, err)
				return
			}
			defer b.Close()
			dev := tensor.NewDevice(b)
			for range 2 {
				for i, c := range cases {
					compareResults(t, want[i], c.run(dev, seed(i)), nil)
				}
			}
		}()
	}
	wg.Wait()
}

// TestTensorOpenEmulator opens the registered backend as any program would.
func TestTensorOpenEmulator(t *testing.T) {
	requireEmulator(t)
	dev, err := tensor.Open(Name)
	if err != nil {
		t.Fatal(err)
	}
	b := dev.Backend().(*Backend)
	defer b.Close()
	if got := b.Properties().Name; got != "kernel emulator" {
		t.Errorf("tensor.Open(%q) opened %q", Name, got)
	}
	x := tensor.Arange(dev, tensor.F32, 0, 1, 10) // 0..9
	if got := tensor.Sum(x).Item(); got != 45 {
		t.Errorf("sum of 0..9 = %v", got)
	}
}
