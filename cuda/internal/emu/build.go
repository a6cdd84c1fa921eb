package emu

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"megago/internal/atomicfile"
)

// compilerFlags are g++'s options: C++20 for std::atomic_ref, -O1 because -O2 takes
// much longer to build for little gain, and no warnings (the kernels are CUDA C, written
// for NVRTC).
var compilerFlags = []string{"-std=c++20", "-O1", "-fPIC", "-shared", "-pthread", "-w"}

// flags returns compilerFlags for this machine: on amd64 without control-flow
// protection, whose shadow stack would refuse the switches to a fiber's stack.
func flags() []string {
	if runtime.GOARCH == "amd64" {
		return append(slices.Clip(compilerFlags), "-fcf-protection=none")
	}
	return slices.Clip(compilerFlags)
}

// maxCompilerOutput is how much of g++'s output an error quotes.
const maxCompilerOutput = 8 << 10

// build returns the path of the library built from src in dir: dir/emu-HASH.so (HASH
// the SHA-256 of the compiler's flags and src), built with g++ unless it is there
// already. Its source is written beside it
// (dir/emu-HASH.cpp) so that g++'s messages point into a file one can read. Both are
// written atomically, so concurrent builds (other processes) each find a whole file.
func build(dir, src string) (string, error) {
	args := flags()
	sum := sha256.Sum256([]byte(strings.Join(args, " ") + "\n" + src))
	base := filepath.Join(dir, "emu-"+hex.EncodeToString(sum[:16]))
	so := base + ".so"
	if _, err := os.Stat(so); err == nil {
		return so, nil
	}
	gxx, err := exec.LookPath("g++")
	if err != nil {
		return "", fmt.Errorf("emu: building the kernel emulator needs g++ (C++20): %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("emu: the emulator's cache: %w", err)
	}
	cpp := base + ".cpp"
	if err := atomicfile.WriteFile(cpp, []byte(src)); err != nil {
		return "", fmt.Errorf("emu: writing the emulator's source: %w", err)
	}
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return "", fmt.Errorf("emu: the emulator's cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "emu.so")
	args = append(args, "-o", out, cpp)
	if msg, err := exec.Command(gxx, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("emu: building the kernel emulator: g++ %s: %v\n%s", cpp, err, clip(msg))
	}
	lib, err := os.ReadFile(out)
	if err != nil {
		return "", fmt.Errorf("emu: reading the emulator g++ built: %w", err)
	}
	if err := atomicfile.WriteFile(so, lib); err != nil {
		return "", fmt.Errorf("emu: caching the emulator: %w", err)
	}
	return so, nil
}

// clip returns at most maxCompilerOutput bytes of a compiler's output.
func clip(msg []byte) string {
	if len(msg) <= maxCompilerOutput {
		return string(msg)
	}
	return fmt.Sprintf("%s\n... (%d more bytes)", msg[:maxCompilerOutput], len(msg)-maxCompilerOutput)
}
