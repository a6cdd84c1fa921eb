package nccl_test

import (
	"fmt"

	"megago/cuda/internal/nccl"
)

// The constants are NCCL's own enum values (nccl.h's ncclDataType_t and ncclRedOp_t),
// passed unchanged through purego: ncclFloat32 is 7, ncclBfloat16 9, ncclAvg 4.
func Example() {
	fmt.Println(nccl.Float32, nccl.Bfloat16, nccl.Sum, nccl.Avg)
	// Output: 7 9 0 4
}
