package driver_test

import (
	"fmt"

	"megago/cuda/internal/driver"
)

// A launch's arguments are packed in the kernel's parameter order, one 8-byte-aligned
// slot each, as cuLaunchKernel takes them.
func ExampleKernelArgs() {
	args := driver.NewKernelArgs().Ptr(0).I32(3).F32(1.5).I64(1 << 40)
	fmt.Println(args.Len())
	// Output: 4
}
