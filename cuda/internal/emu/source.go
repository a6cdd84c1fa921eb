package emu

import (
	_ "embed"
	"fmt"
	"slices"
	"strings"

	"megago/cuda/internal/kernels"
)

// shim is the CUDA C++ the kernels need, for the host.
//
//go:embed shim.hpp
var shim string

// runtimeSrc is the launch table's machinery and the library's entry points.
//
//go:embed runtime.hpp
var runtimeSrc string

// preludeAsm is the one line of inline PTX in the kernels (a float64 to float32
// conversion rounding toward zero), and preludeHost its replacement from shim.hpp.
const (
	preludeAsm  = `asm("cvt.rz.f32.f64 %0, %1;" : "=f"(r) : "d"(x));`
	preludeHost = "r = emu_cvt_rz(x);"
)

// Source returns the C++ translation unit of the emulator: the shim, the prelude and
// every module's source once (with each module's extra text), the runtime, and a table
// registering every kernel the Go side launches under its name. (Inline PTX other than
// preludeAsm would make g++ fail, with its message in Open's error.)
func Source() string {
	var b strings.Builder
	b.WriteString(shim)
	pre := mustRead("prelude.cu")
	b.WriteString(strings.Replace(string(pre), preludeAsm, preludeHost, 1))
	mods := kernels.Modules()
	var names []string
	files := map[string]bool{}
	for _, name := range kernels.Names() {
		m := mods[name]
		if !files[m.File] {
			files[m.File] = true
			b.Write(mustRead(m.File + ".cu"))
			b.WriteString("\n")
		}
		b.WriteString(m.Extra)
		for _, k := range m.Kernels {
			if !slices.Contains(names, k) {
				names = append(names, k)
			}
		}
	}
	b.WriteString(runtimeSrc)
	b.WriteString("static int emu_reg = [] {\n  auto& m = emu_registry();\n")
	for _, k := range names {
		fmt.Fprintf(&b, "  m[%q] = [](void** p) { emu_call(%s, p); };\n", k, k)
	}
	b.WriteString("  return 0;\n}();\n")
	return b.String()
}

// mustRead returns an embedded kernel source. It panics if there is none: package
// kernels lists a module whose file it does not embed.
func mustRead(name string) []byte {
	src, err := kernels.ReadFile(name)
	if err != nil {
		panic("emu: " + err.Error())
	}
	return src
}
