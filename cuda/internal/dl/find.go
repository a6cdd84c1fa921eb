package dl

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// A Library is a shared library searched for by file name.
type Library struct {
	Name  string   // for messages: "driver", "NVRTC", "cuBLASLt", "NCCL"
	Files []string // file names (sonames), preferred first
	// Toolkit marks a library shipped with the CUDA toolkit or in a Python wheel, searched
	// for under CUDA_HOME and site-packages too; the driver (libcuda) is not: what the
	// toolkit has of it is a stub that cannot run anything.
	Toolkit bool
}

// The libraries megago opens, with the names of CUDA 13, 12 and 11, newest first.
var (
	LibDriver   = Library{Name: "driver", Files: []string{"libcuda.so.1", "libcuda.so"}}
	LibNVRTC    = Library{Name: "NVRTC", Files: []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so.11.1", "libnvrtc.so.11.0", "libnvrtc.so"}, Toolkit: true}
	LibCublasLt = Library{Name: "cuBLASLt", Files: []string{"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11", "libcublasLt.so"}, Toolkit: true}
	LibNCCL     = Library{Name: "NCCL", Files: []string{"libnccl.so.2", "libnccl.so"}, Toolkit: true}
)

// EnvLibDirs is the environment variable holding extra folders (separated by ':') that are
// searched before any other.
const EnvLibDirs = "MEGAGO_CUDA_LIBS"

// SearchEnv is what a library search looks at: environment variables and the file system.
// Tests replace it with a fake one; DefaultSearchEnv is the real one.
type SearchEnv struct {
	Getenv func(key string) string
	Glob   func(pattern string) ([]string, error) // as filepath.Glob
	Exists func(path string) bool                 // whether path is a file (or a link to one)
	GOARCH string                                 // "amd64", "arm64"
}

// DefaultSearchEnv returns the process's environment and file system.
func DefaultSearchEnv() SearchEnv {
	return SearchEnv{
		Getenv: os.Getenv,
		Glob:   filepath.Glob,
		Exists: func(p string) bool {
			fi, err := os.Stat(p)
			return err == nil && !fi.IsDir()
		},
		GOARCH: runtime.GOARCH,
	}
}

// archDirs returns the Debian multiarch triplet and the CUDA toolkit's target folder name.
func archDirs(goarch string) (triplet, target string) {
	if goarch == "arm64" {
		return "aarch64-linux-gnu", "sbsa-linux"
	}
	return "x86_64-linux-gnu", "x86_64-linux"
}

// Dirs returns the folders searched for l, in order, without duplicates:
//
//  1. MEGAGO_CUDA_LIBS;
//  2. for toolkit libraries, CUDA_HOME, CUDA_PATH and CUDA_ROOT (each's lib64, lib and
//     targets/<arch>/lib);
//  3. LD_LIBRARY_PATH;
//  4. for toolkit libraries, the nvidia/*/lib folders of Python wheels in the
//     site-packages of VIRTUAL_ENV, CONDA_PREFIX, PYTHONPATH, ~/.local and the system
//     Pythons, and CONDA_PREFIX/lib;
//  5. the system's folders: /usr/local/cuda (toolkit libraries), /usr/lib/<triplet>,
//     /usr/lib64, /usr/lib, /usr/local/lib, /usr/local/nvidia/lib64 and /usr/lib/wsl/lib.
//
// After these, the bare file names are given to the system loader (ld.so.cache).
func (l Library) Dirs(env SearchEnv) []string {
	var dirs []string
	add := func(ds ...string) {
		for _, d := range ds {
			if d != "" && !slices.Contains(dirs, filepath.Clean(d)) {
				dirs = append(dirs, filepath.Clean(d))
			}
		}
	}
	triplet, target := archDirs(env.GOARCH)
	add(filepath.SplitList(env.Getenv(EnvLibDirs))...)
	if l.Toolkit {
		for _, v := range []string{"CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"} {
			if h := env.Getenv(v); h != "" {
				add(filepath.Join(h, "lib64"), filepath.Join(h, "lib"), filepath.Join(h, "targets", target, "lib"))
			}
		}
	}
	add(filepath.SplitList(env.Getenv("LD_LIBRARY_PATH"))...)
	if l.Toolkit {
		add(wheelDirs(env)...)
	}
	if l.Toolkit {
		add("/usr/local/cuda/lib64", filepath.Join("/usr/local/cuda/targets", target, "lib"))
	}
	add(filepath.Join("/usr/lib", triplet), "/usr/lib64", "/usr/lib", "/usr/local/lib",
		"/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/wsl/lib")
	return dirs
}

// wheelDirs returns the lib folders of NVIDIA's Python wheels (nvidia/cuda_nvrtc/lib,
// nvidia/cublas/lib, nvidia/nccl/lib, nvidia/cu13/lib, ...) that exist, and conda's lib.
func wheelDirs(env SearchEnv) []string {
	var sites []string
	pys := []string{"python3*"}
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := env.Getenv(v); p != "" {
			for _, py := range pys {
				sites = append(sites, filepath.Join(p, "lib", py, "site-packages"))
			}
		}
	}
	sites = append(sites, filepath.SplitList(env.Getenv("PYTHONPATH"))...)
	if h := env.Getenv("HOME"); h != "" {
		sites = append(sites, filepath.Join(h, ".local/lib/python3*/site-packages"))
	}
	sites = append(sites,
		"/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages",
		"/usr/lib/python3/dist-packages", "/usr/lib/python3*/site-packages",
		"/opt/conda/lib/python3*/site-packages")
	var out []string
	for _, s := range sites {
		if s == "" {
			continue
		}
		matches, err := env.Glob(filepath.Join(s, "nvidia", "*", "lib"))
		if err != nil {
			continue // a malformed pattern from the environment: nothing to search there
		}
		slices.Sort(matches)
		out = append(out, matches...)
	}
	if p := env.Getenv("CONDA_PREFIX"); p != "" {
		out = append(out, filepath.Join(p, "lib"))
	}
	return out
}

// Candidates returns what to give the loader, in order: every file of l that exists in
// one of Dirs (folder order first, then l.Files order), followed by l's bare file names
// for the system loader.
func (l Library) Candidates(env SearchEnv) []string {
	var out []string
	for _, d := range l.Dirs(env) {
		for _, f := range l.Files {
			if p := filepath.Join(d, f); env.Exists(p) {
				out = append(out, p)
			}
		}
	}
	return append(out, l.Files...)
}

// Locate opens l, searching as Candidates lists, and returns the path it opened (a bare
// file name when the system loader found it). The library stays loaded. A library that
// cannot be found or opened is a *LoadError wrapping ErrNoDevice.
func (l Library) Locate(env SearchEnv) (string, error) {
	lib, err := l.Open(env)
	if err != nil {
		return "", err
	}
	return lib.path, nil
}

// Open opens l, searching as Candidates lists, for a Binder. A library that cannot be
// found or opened is a *LoadError wrapping ErrNoDevice.
func (l Library) Open(env SearchEnv) (*Lib, error) { return l.open(env, dlopen) }

// open tries each candidate in order with dlopen and returns the first that opens. A
// bare name that the system loader does not know is recorded only when nothing else was
// tried, so that the error lists real failures (a file found but unusable) first.
func (l Library) open(env SearchEnv, dlopen func(path string) (uintptr, error)) (*Lib, error) {
	e := &LoadError{Library: l.Name, Files: l.Files, Dirs: l.Dirs(env)}
	var bare []Attempt
	for _, p := range l.Candidates(env) {
		h, err := dlopen(p)
		if err == nil {
			return &Lib{name: l.Name, path: p, handle: h}, nil
		}
		a := Attempt{Path: p, Err: trimDlerror(err)}
		if strings.ContainsRune(p, '/') {
			e.Attempts = append(e.Attempts, a)
		} else {
			bare = append(bare, a)
		}
	}
	if len(e.Attempts) == 0 && len(bare) > 0 {
		e.Attempts = bare[:1]
	}
	return nil, e
}

// dlError is a loader message without the path it repeats.
type dlError string

func (e dlError) Error() string { return string(e) }

// trimDlerror shortens "path: cannot open shared object file: ..." to the reason.
func trimDlerror(err error) error {
	s := err.Error()
	if i := strings.Index(s, ".so"); i >= 0 {
		if j := strings.Index(s[i:], ": "); j >= 0 {
			return dlError(s[i+j+2:])
		}
	}
	return dlError(s)
}

// Lib is an opened shared library.
type Lib struct {
	name   string // Library.Name
	path   string // what was opened
	handle uintptr
}

// OpenPath opens the shared library at path (a library megago builds itself, such as the
// kernel emulator of package cuda's tests), naming it name in errors.
func OpenPath(name, path string) (*Lib, error) {
	h, err := dlopen(path)
	if err != nil {
		return nil, err
	}
	return &Lib{name: name, path: path, handle: h}, nil
}

// Path returns the file the library was opened from (a bare file name when the system
// loader found it).
func (l *Lib) Path() string { return l.path }
