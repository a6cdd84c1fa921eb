package emu_test

import (
	"fmt"
	"strings"

	"megago/cuda/internal/emu"
)

// The emulator's source is one C++ translation unit holding every kernel, with a table
// that launches each by its name.
func ExampleSource() {
	src := emu.Source()
	fmt.Println(strings.Contains(src, ") softmax_f(void* y"), strings.Contains(src, `m["softmax_f"]`))
	// Output: true true
}
