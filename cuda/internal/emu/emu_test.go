package emu

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"megago/cuda/internal/dl"
	"megago/cuda/internal/kernels"
	"megago/cuda/internal/nccl"
)

// requireGXX skips the test without g++, or fails it under MEGAGO_CUDA_EMU=1, where the
// emulator must build.
func requireGXX(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("g++"); err != nil {
		if os.Getenv("MEGAGO_CUDA_EMU") == "1" {
			t.Fatalf("MEGAGO_CUDA_EMU=1: %v", err)
		}
		t.Skipf("needs g++: %v", err)
	}
}

func TestSourceRegistersEveryKernel(t *testing.T) {
	src := Source()
	for name, m := range kernels.Modules() {
		for _, k := range m.Kernels {
			if !strings.Contains(src, fmt.Sprintf("m[%q] = ", k)) {
				t.Errorf("kernel %s of module %s is not in the launch table", k, name)
			}
		}
	}
	if strings.Contains(src, preludeAsm) {
		t.Error("the source still holds the prelude's inline PTX")
	}
}

func TestBuildQuotesCompilerOutput(t *testing.T) {
	requireGXX(t)
	_, err := build(t.TempDir(), "int broken( {\n")
	if err == nil {
		t.Fatal("a broken source built")
	}
	for _, want := range []string{"g++", "error:", "broken"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not quote %q", err, want)
		}
	}
}

// TestBuildCachesAtomically builds one small library from three goroutines at once into
// one folder (as processes starting together would), then again: every build returns
// the same whole library, the second from the cache, and no temporary file is left.
func TestBuildCachesAtomically(t *testing.T) {
	requireGXX(t)
	dir := t.TempDir()
	const src = `extern "C" int emu_answer() { return 42; }`
	paths := make([]string, 3)
	var wg sync.WaitGroup
	for i := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := build(dir, src)
			if err != nil {
				t.Error(err)
			}
			paths[i] = p
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, p := range paths[1:] {
		if p != paths[0] {
			t.Fatalf("builds of one source gave %v", paths)
		}
	}
	before, err := os.Stat(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	if p, err := build(dir, src); err != nil || p != paths[0] {
		t.Fatalf("second build: %q, %v", p, err)
	}
	if after, _ := os.Stat(paths[0]); !after.ModTime().Equal(before.ModTime()) {
		t.Error("the cached library was rebuilt")
	}
	lib, err := dl.OpenPath("test", paths[0])
	if err != nil {
		t.Fatal(err)
	}
	var answer func() int32
	b := dl.NewBinder(lib)
	b.Bind(&answer, "emu_answer")
	if err := b.Err(dl.Library{Name: "test"}); err != nil {
		t.Fatal(err)
	}
	if got := answer(); got != 42 {
		t.Errorf("emu_answer() = %d", got)
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestInitRankRejectsMismatches joins ranks to one id with conflicting arguments.
func TestInitRankRejectsMismatches(t *testing.T) {
	e := &NCCL{}
	ctx := context.Background()
	id, _ := e.NewUniqueID()
	h, err := e.InitRank(ctx, id, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ nranks, rank int }{{2, 0}, {3, 1}, {2, 2}} {
		if _, err := e.InitRank(ctx, id, c.nranks, c.rank); err == nil {
			t.Errorf("rank %d of %d joined a 2-rank communicator whose rank 0 had joined", c.rank, c.nranks)
		}
	}
	if _, err := e.InitRank(ctx, nccl.UniqueID{}, 0, 0); err == nil {
		t.Error("a communicator of 0 ranks was created")
	}
	h1, err := e.InitRank(ctx, id, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []nccl.Handle{h, h1} {
		if err := e.Destroy(h); err != nil {
			t.Error(err)
		}
	}
	if err := e.Destroy(h); err == nil {
		t.Error("a communicator was destroyed twice")
	}
}
