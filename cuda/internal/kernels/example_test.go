package kernels_test

import (
	"fmt"
	"strings"

	"megago/cuda/internal/kernels"
)

// Each module's source is self-contained: the shared prelude (its own bf16/fp16 helpers,
// no CUDA headers) followed by the module's kernels, so NVRTC compiles it without a CUDA
// toolkit.
func ExampleSource() {
	names := kernels.Names()
	src := kernels.Source(names[0])
	fmt.Println(len(names) > 0, strings.Contains(src, "#include <cuda_bf16.h>"))
	// Output: true false
}
