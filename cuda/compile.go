package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// compiler compiles kernel modules for one architecture, caching the results on disk.
type compiler struct {
	// compile runs NVRTC (NVRTC.Compile, or a fake in tests).
	compile func(src, name string, options []string) (Compiled, error)
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

// cacheKey names a compilation's output: the module, the target and a hash of everything
// the output depends on (source, options, NVRTC version).
func (c *compiler) cacheKey(mod, src string, opts []string) string {
	h := sha256.New()
	for _, s := range []string{src, strings.Join(opts, " "), c.version} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	kind, ext := "compute", "ptx"
	if c.real {
		kind, ext = "sm", "cubin"
	}
	return fmt.Sprintf("%s-%s_%d-%s.%s", mod, kind, c.arch, hex.EncodeToString(h.Sum(nil))[:24], ext)
}

// module returns the compiled image (CUBIN or PTX) of module mod, from the cache when a
// previous compilation of the same source, options and NVRTC is there. The cache is best
// effort: a file that cannot be written is skipped; a compile error is returned.
func (c *compiler) module(mod string) ([]byte, error) {
	src := moduleSource(mod)
	opts := compileOptions(c.arch, c.real)
	path := ""
	if c.dir != "" {
		path = filepath.Join(c.dir, c.cacheKey(mod, src, opts))
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return b, nil
		}
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
		_ = writeFileAtomic(path, img) // a cache that cannot be written only costs time
	}
	return img, nil
}

// writeFileAtomic writes b to a temporary file in path's folder and renames it to path,
// so that a reader never sees a partial file.
func writeFileAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}
