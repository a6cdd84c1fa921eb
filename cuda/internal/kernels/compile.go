package kernels

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"megago/cuda/internal/nvrtc"
	"megago/internal/atomicfile"
)

// Compiler compiles kernel modules for one architecture, caching the results on disk.
type Compiler struct {
	// compile runs NVRTC (nvrtc.NVRTC.Compile, or a fake in tests); nil when NVRTC could
	// not be loaded, in which case only cached images are used, whatever NVRTC built them.
	compile func(src, name string, options []string) (nvrtc.Compiled, error)
	noNVRTC error  // why compile is nil
	version string // NVRTC's version, part of the cache key
	arch    int
	real    bool
	dir     string // cache folder; "" disables the disk cache
}

// DefaultCacheDir returns where compiled kernels are cached: os.UserCacheDir()/megago/cuda,
// or "" (no disk cache) when the system has no cache folder.
func DefaultCacheDir() string {
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "megago", "cuda")
}

// NewCompiler returns the compiler for a device of compute capability arch (e.g. 90)
// named device, caching in dir ("" for no disk cache): NVRTC targeting the device's
// architecture (chooseTarget), or, when NVRTC could not be loaded (nvErr), the cache
// only, for the device's own architecture.
func NewCompiler(nv *nvrtc.NVRTC, nvErr error, arch int, device, dir string) (*Compiler, error) {
	if nvErr != nil {
		return &Compiler{noNVRTC: nvErr, arch: arch, real: true, dir: dir}, nil
	}
	archs, err := nv.SupportedArchs()
	if err != nil {
		return nil, err
	}
	target, real, ok := chooseTarget(arch, archs)
	if !ok {
		return nil, fmt.Errorf("cuda: NVRTC %s supports no architecture as old as sm_%d of %s", nv.Path(), arch, device)
	}
	major, minor := nv.Version()
	return &Compiler{compile: nv.Compile, version: fmt.Sprintf("%d.%d", major, minor), arch: target, real: real, dir: dir}, nil
}

// cacheKey names a compilation's output: the module, the target, a hash of the source
// and options, and NVRTC's version; the part before the version is the prefix every
// NVRTC's output of the same source shares.
func (c *Compiler) cacheKey(mod, src string, opts []string) (name, prefix string) {
	h := sha256.New()
	for _, s := range []string{src, strings.Join(opts, " ")} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	kind, ext := "compute", "ptx"
	if c.real {
		kind, ext = "sm", "cubin"
	}
	prefix = fmt.Sprintf("%s-%s_%d-%s-", mod, kind, c.arch, hex.EncodeToString(h.Sum(nil))[:24])
	return prefix + "nvrtc" + c.version + "." + ext, prefix
}

// Module returns the compiled image (CUBIN or PTX) of module mod, from the cache when a
// previous compilation of the same source, options and NVRTC is there. Without NVRTC an
// image of the same source from any NVRTC is used. The cache is best effort: a file that
// cannot be written is skipped; a compile error (*nvrtc.CompileError) is returned.
func (c *Compiler) Module(mod string) ([]byte, error) {
	src := Source(mod)
	opts := compileOptions(c.arch, c.real)
	path := ""
	if c.dir != "" {
		name, prefix := c.cacheKey(mod, src, opts)
		path = filepath.Join(c.dir, name)
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return b, nil
		}
		if c.compile == nil {
			others, _ := filepath.Glob(filepath.Join(c.dir, prefix+"nvrtc*"))
			for _, o := range others {
				if b, err := os.ReadFile(o); err == nil && len(b) > 0 {
					return b, nil
				}
			}
		}
	}
	if c.compile == nil {
		return nil, fmt.Errorf("cuda: kernel module %s for %s is not in the cache %q and NVRTC is missing: %w",
			mod, opts[0], c.dir, c.noNVRTC)
	}
	out, err := c.compile(src, mod+".cu", opts)
	if err != nil {
		return nil, err
	}
	img := out.PTX
	if c.real {
		img = out.CUBIN
	}
	if len(img) == 0 {
		return nil, errors.New("cuda: NVRTC produced no output for " + mod)
	}
	if path != "" {
		// A cache that cannot be written only costs time.
		if os.MkdirAll(filepath.Dir(path), 0o755) == nil {
			_ = atomicfile.WriteFile(path, img)
		}
	}
	return img, nil
}
