package kernels

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"megago/cuda/internal/nvrtc"
)

// TestKernelsCompile compiles every embedded module to CUBIN for sm_80 and sm_90 with
// NVRTC, and checks that each defines every kernel the Go side launches. Results go to
// the same disk cache the backend uses (keyed by source, options and NVRTC version), so
// only changed modules are compiled again. It skips without NVRTC unless
// MEGAGO_REQUIRE_NVRTC=1.
func TestKernelsCompile(t *testing.T) {
	n := nvrtc.LoadOrSkip(t)
	major, minor := n.Version()
	mods := Modules()
	for _, arch := range []int{80, 90} {
		c := &Compiler{compile: n.Compile, version: fmt.Sprintf("%d.%d", major, minor), arch: arch, real: true, dir: DefaultCacheDir()}
		for _, name := range Names() {
			t.Run(fmt.Sprintf("sm_%d/%s", arch, name), func(t *testing.T) {
				t.Parallel()
				img, err := c.Module(name)
				if err != nil {
					t.Fatal(err)
				}
				if len(img) < 4 || string(img[1:4]) != "ELF" {
					t.Fatalf("not a CUBIN: % x", img[:min(len(img), 16)])
				}
				for _, k := range mods[name].Kernels {
					if !cubinDefines(img, k) {
						t.Errorf("kernel %s not defined", k)
					}
				}
			})
		}
	}
}

// cubinDefines reports whether a CUBIN has a code section for kernel k (".text.k"; the
// CUBIN's ELF header has an NVIDIA version number that debug/elf refuses).
func cubinDefines(img []byte, k string) bool {
	return bytes.Contains(img, []byte(".text."+k+"\x00"))
}

func TestKernelsCompileWarningFree(t *testing.T) {
	n := nvrtc.LoadOrSkip(t)
	// One small module without the cache: NVRTC's log must be empty (no warnings).
	out, err := n.Compile(Source("optim"), "optim.cu", compileOptions(80, false))
	if err != nil {
		t.Fatal(err)
	}
	if out.Log != "" {
		t.Errorf("warnings:\n%s", out.Log)
	}
	if !strings.Contains(string(out.PTX), ".entry adam_f") {
		t.Error("PTX lacks adam_f")
	}
}

func TestChooseTarget(t *testing.T) {
	nvrtc118 := []int{35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90}
	cases := []struct {
		name      string
		arch      int
		supported []int
		target    int
		real, ok  bool
	}{
		{"H100 with NVRTC 11.8", 90, nvrtc118, 90, true, true},
		{"A100", 80, nvrtc118, 80, true, true},
		{"Blackwell with NVRTC 11.8: PTX for the newest known", 100, nvrtc118, 90, false, true},
		{"NVRTC older than 11.2 lists nothing", 86, nil, 86, false, true},
		{"device older than anything supported", 30, nvrtc118, -1, false, false},
	}
	for _, c := range cases {
		target, real, ok := chooseTarget(c.arch, c.supported)
		if target != c.target || real != c.real || ok != c.ok {
			t.Errorf("%s: chooseTarget(%d) = %d, %v, %v; want %d, %v, %v", c.name, c.arch, target, real, ok, c.target, c.real, c.ok)
		}
	}
}

func TestCompilerCache(t *testing.T) {
	dir := t.TempDir()
	calls := 0
	fake := func(src, name string, opts []string) (nvrtc.Compiled, error) {
		calls++
		if !strings.Contains(src, "adam_impl") || name != "optim.cu" {
			return nvrtc.Compiled{}, errors.New("unexpected source")
		}
		return nvrtc.Compiled{CUBIN: []byte("image of " + strings.Join(opts, " "))}, nil
	}
	c := &Compiler{compile: fake, version: "11.8", arch: 90, real: true, dir: dir}
	first, err := c.Module("optim")
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Module("optim")
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 || !bytes.Equal(first, second) {
		t.Errorf("second call compiled again (%d compilations) or differs", calls)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(files) != 1 || !strings.HasPrefix(filepath.Base(files[0]), "optim-sm_90-") || !strings.HasSuffix(files[0], ".cubin") {
		t.Errorf("cache holds %v, want one optim-sm_90-*.cubin (no temporary files)", files)
	}
	// Another NVRTC version or architecture is another entry.
	for _, other := range []*Compiler{
		{compile: fake, version: "12.4", arch: 90, real: true, dir: dir},
		{compile: fake, version: "11.8", arch: 80, real: true, dir: dir},
	} {
		if _, err := other.Module("optim"); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 3 {
		t.Errorf("%d compilations, want 3 (version and arch are part of the key)", calls)
	}
	// Without NVRTC, an image of the same source from another NVRTC serves; a module that
	// was never compiled is an error naming the missing NVRTC.
	noNVRTC := errors.New("NVRTC not found")
	cacheOnly := &Compiler{noNVRTC: noNVRTC, arch: 90, real: true, dir: dir}
	if got, err := cacheOnly.Module("optim"); err != nil || !bytes.Equal(got, first) {
		t.Errorf("cache-only compiler: %q, %v; want the cached image", got, err)
	}
	if _, err := cacheOnly.Module("softmax"); !errors.Is(err, noNVRTC) || !strings.Contains(err.Error(), "softmax") {
		t.Errorf("cache-only compiler, uncached module: %v", err)
	}
	// An unwritable cache folder still compiles.
	ro := filepath.Join(dir, "file")
	if err := os.WriteFile(ro, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c = &Compiler{compile: fake, version: "11.8", arch: 90, real: true, dir: filepath.Join(ro, "sub")}
	if _, err := c.Module("optim"); err != nil {
		t.Errorf("unwritable cache: %v", err)
	}
	// A compile error is returned.
	bad := &Compiler{compile: func(string, string, []string) (nvrtc.Compiled, error) {
		return nvrtc.Compiled{}, &nvrtc.CompileError{Name: "optim.cu", Log: "error"}
	}, arch: 90, real: true}
	var ce *nvrtc.CompileError
	if _, err := bad.Module("optim"); !errors.As(err, &ce) {
		t.Errorf("compile error: got %v", err)
	}
}

func TestModuleSources(t *testing.T) {
	for _, name := range Names() {
		src := Source(name)
		if strings.Contains(src, "\n#include") {
			t.Errorf("%s includes a header; kernels must be self-contained", name)
		}
	}
	if got := Modules()[AttentionModule("bf16", 64)].Extra; got != "FLASH(bf16, BF16S, 64)\n" {
		t.Errorf("attention instantiation %q", got)
	}
}
