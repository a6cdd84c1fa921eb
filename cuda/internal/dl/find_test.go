package dl

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeFS is a file system of the given files, for SearchEnv.
type fakeFS map[string]bool

func (f fakeFS) env(vars map[string]string) SearchEnv {
	return SearchEnv{
		Getenv: func(k string) string { return vars[k] },
		Glob: func(pattern string) ([]string, error) {
			var out []string
			seen := map[string]bool{}
			for p := range f {
				// A wheel lib folder matches when a file lies in it.
				d := filepath.Dir(p)
				if ok, err := filepath.Match(pattern, d); err != nil {
					return nil, err
				} else if ok && !seen[d] {
					seen[d] = true
					out = append(out, d)
				}
			}
			return out, nil
		},
		Exists: func(p string) bool { return f[p] },
		GOARCH: "amd64",
	}
}

func TestCandidatesOrder(t *testing.T) {
	cases := []struct {
		name  string
		lib   Library
		files []string
		vars  map[string]string
		want  []string // before the bare names
	}{
		{
			name:  "nothing installed",
			lib:   LibNVRTC,
			files: nil,
			want:  nil,
		},
		{
			name:  "debian package",
			lib:   LibNVRTC,
			files: []string{"/usr/lib/x86_64-linux-gnu/libnvrtc.so.11.2"},
			want:  []string{"/usr/lib/x86_64-linux-gnu/libnvrtc.so.11.2"},
		},
		{
			name: "CUDA_HOME before LD_LIBRARY_PATH before the system",
			lib:  LibCublasLt,
			files: []string{
				"/usr/lib/x86_64-linux-gnu/libcublasLt.so.12",
				"/opt/cuda-13/lib64/libcublasLt.so.13",
				"/ld/libcublasLt.so.11",
			},
			vars: map[string]string{"CUDA_HOME": "/opt/cuda-13", "LD_LIBRARY_PATH": "/ld:/nowhere"},
			want: []string{"/opt/cuda-13/lib64/libcublasLt.so.13", "/ld/libcublasLt.so.11", "/usr/lib/x86_64-linux-gnu/libcublasLt.so.12"},
		},
		{
			name: "newest soname first within a folder",
			lib:  LibNVRTC,
			files: []string{
				"/usr/local/cuda/lib64/libnvrtc.so",
				"/usr/local/cuda/lib64/libnvrtc.so.11.2",
				"/usr/local/cuda/lib64/libnvrtc.so.12",
			},
			want: []string{"/usr/local/cuda/lib64/libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so.11.2", "/usr/local/cuda/lib64/libnvrtc.so"},
		},
		{
			name: "python wheels in a virtualenv and the user's site",
			lib:  LibNCCL,
			files: []string{
				"/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2",
				"/home/u/.local/lib/python3.10/site-packages/nvidia/nccl/lib/libnccl.so.2",
			},
			vars: map[string]string{"VIRTUAL_ENV": "/venv", "HOME": "/home/u"},
			want: []string{
				"/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2",
				"/home/u/.local/lib/python3.10/site-packages/nvidia/nccl/lib/libnccl.so.2",
			},
		},
		{
			name:  "CUDA 13 wheel layout",
			lib:   LibNVRTC,
			files: []string{"/usr/local/lib/python3.12/dist-packages/nvidia/cu13/lib/libnvrtc.so.13"},
			want:  []string{"/usr/local/lib/python3.12/dist-packages/nvidia/cu13/lib/libnvrtc.so.13"},
		},
		{
			name: "the driver is not taken from the toolkit or wheels",
			lib:  LibDriver,
			files: []string{
				"/opt/cuda/lib64/libcuda.so.1",
				"/venv/lib/python3.11/site-packages/nvidia/x/lib/libcuda.so.1",
				"/usr/lib/wsl/lib/libcuda.so.1",
			},
			vars: map[string]string{"CUDA_HOME": "/opt/cuda", "VIRTUAL_ENV": "/venv"},
			want: []string{"/usr/lib/wsl/lib/libcuda.so.1"},
		},
		{
			name: "MEGAGO_CUDA_LIBS first",
			lib:  LibDriver,
			files: []string{
				"/usr/lib/x86_64-linux-gnu/libcuda.so.1",
				"/compat/libcuda.so.1",
			},
			vars: map[string]string{EnvLibDirs: "/compat"},
			want: []string{"/compat/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"},
		},
		{
			name:  "a folder listed twice is searched once",
			lib:   LibNCCL,
			files: []string{"/usr/lib/x86_64-linux-gnu/libnccl.so.2"},
			vars:  map[string]string{"LD_LIBRARY_PATH": "/usr/lib/x86_64-linux-gnu/:/usr/lib/x86_64-linux-gnu"},
			want:  []string{"/usr/lib/x86_64-linux-gnu/libnccl.so.2"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := fakeFS{}
			for _, f := range c.files {
				fs[f] = true
			}
			got := c.lib.Candidates(fs.env(c.vars))
			want := append(slices.Clone(c.want), c.lib.Files...)
			if !slices.Equal(got, want) {
				t.Errorf("candidates\n got %q\nwant %q", got, want)
			}
		})
	}
}

func TestDirsArm64(t *testing.T) {
	env := fakeFS{}.env(map[string]string{"CUDA_HOME": "/cuda"})
	env.GOARCH = "arm64"
	dirs := LibNVRTC.Dirs(env)
	for _, want := range []string{"/cuda/targets/sbsa-linux/lib", "/usr/lib/aarch64-linux-gnu"} {
		if !slices.Contains(dirs, want) {
			t.Errorf("arm64 dirs %q lack %s", dirs, want)
		}
	}
}

func TestOpenTriesInOrderAndReports(t *testing.T) {
	fs := fakeFS{
		"/usr/local/cuda/lib64/libnvrtc.so.12":       true,
		"/usr/lib/x86_64-linux-gnu/libnvrtc.so.11.2": true,
	}
	env := fs.env(nil)
	var tried []string
	broken := func(p string) (uintptr, error) {
		tried = append(tried, p)
		if p == "/usr/lib/x86_64-linux-gnu/libnvrtc.so.11.2" {
			return 42, nil
		}
		return 0, fmt.Errorf("%s: wrong ELF class: ELFCLASS32", p)
	}
	lib, err := LibNVRTC.open(env, broken)
	if err != nil {
		t.Fatal(err)
	}
	if lib.path != "/usr/lib/x86_64-linux-gnu/libnvrtc.so.11.2" || lib.handle != 42 {
		t.Errorf("opened %+v", lib)
	}
	if want := []string{"/usr/local/cuda/lib64/libnvrtc.so.12", "/usr/lib/x86_64-linux-gnu/libnvrtc.so.11.2"}; !slices.Equal(tried, want) {
		t.Errorf("tried %q, want %q", tried, want)
	}
}

func TestOpenErrorListsWhatWasTried(t *testing.T) {
	fs := fakeFS{"/opt/cuda/lib64/libcublasLt.so.12": true}
	env := fs.env(map[string]string{"CUDA_HOME": "/opt/cuda"})
	fail := func(p string) (uintptr, error) {
		if strings.HasPrefix(p, "/") {
			return 0, fmt.Errorf("%s: libcublas.so.12: cannot open shared object file: No such file or directory", p)
		}
		return 0, fmt.Errorf("%s: cannot open shared object file: No such file or directory", p)
	}
	_, err := LibCublasLt.open(env, fail)
	if !errors.Is(err, ErrNoDevice) {
		t.Fatalf("error %v does not wrap ErrNoDevice", err)
	}
	var le *LoadError
	if !errors.As(err, &le) {
		t.Fatalf("error %T is not a *LoadError", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"cuda: cuBLASLt not found",
		"libcublasLt.so.13, libcublasLt.so.12, libcublasLt.so.11",
		"/opt/cuda/lib64, /opt/cuda/lib, /opt/cuda/targets/x86_64-linux/lib",
		"/usr/lib/x86_64-linux-gnu",
		"system loader",
		// the file that exists and failed, with the loader's reason (not its path twice)
		"/opt/cuda/lib64/libcublasLt.so.12: libcublas.so.12: cannot open shared object file",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "; libcublasLt.so.13:") {
		t.Errorf("bare-name failures listed although a real file failed:\n%s", msg)
	}
}

func TestOpenNothingFoundNamesTheSystemLoader(t *testing.T) {
	fail := func(p string) (uintptr, error) {
		return 0, fmt.Errorf("%s: cannot open shared object file: No such file or directory", p)
	}
	_, err := LibDriver.open(fakeFS{}.env(nil), fail)
	want := "; libcuda.so.1: cannot open shared object file: No such file or directory"
	if err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("error %v, want one ending in %q", err, want)
	}
}

func TestMissingSymbolsError(t *testing.T) {
	err := &LoadError{Library: "NCCL", Files: LibNCCL.Files, Attempts: []Attempt{{Path: "/x/libnccl.so.2"}},
		Missing: []string{"ncclCommSplit", "ncclGroupStart"}}
	want := "cuda: NCCL at /x/libnccl.so.2 lacks ncclCommSplit, ncclGroupStart (library too old?)"
	if err.Error() != want || !errors.Is(err, ErrNoDevice) {
		t.Errorf("got %q (wraps ErrNoDevice: %v), want %q", err, errors.Is(err, ErrNoDevice), want)
	}
}

func TestErrorMessages(t *testing.T) {
	cases := []struct {
		err      *Error
		want     string
		noDevice bool
	}{
		{&Error{Lib: "driver", Func: "cuInit", Code: 100, Name: "CUDA_ERROR_NO_DEVICE", Msg: "no CUDA-capable device is detected"},
			"cuda: driver: cuInit: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected", true},
		{&Error{Lib: "driver", Func: "cuInit", Code: 34, Name: "CUDA_ERROR_STUB_LIBRARY"},
			"cuda: driver: cuInit: CUDA_ERROR_STUB_LIBRARY (34)", true},
		{&Error{Lib: "driver", Func: "cuMemAlloc_v2", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY", Msg: "out of memory"},
			"cuda: driver: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory", false},
		{&Error{Lib: "NVRTC", Func: "nvrtcCompileProgram", Code: 6, Msg: "NVRTC_ERROR_COMPILATION"},
			"cuda: NVRTC: nvrtcCompileProgram: error 6: NVRTC_ERROR_COMPILATION", false},
		{&Error{Lib: "NCCL", Func: "ncclAllReduce", Code: 3},
			"cuda: NCCL: ncclAllReduce: error 3", false},
	}
	for _, c := range cases {
		if got := c.err.Error(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
		if got := errors.Is(c.err, ErrNoDevice); got != c.noDevice {
			t.Errorf("%q: errors.Is(ErrNoDevice) = %v", c.want, got)
		}
	}
}
