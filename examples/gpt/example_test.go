package main

import (
	"context"
	"fmt"
	"io"
)

// Bad settings stop a run with one message, before any work starts.
func Example() {
	args := []string{"--ranks", "4", "--tensor-model-parallel-size", "3", "--bf16", "--fp16"}
	_, err := run(context.Background(), args, func(string) string { return "" }, io.Discard, io.Discard)
	fmt.Println(err)
	// Output:
	// invalid settings:
	//   4 ranks do not divide into TP=3 × PP=1
	//   --bf16 and --fp16 are exclusive
	//   --num-attention-heads 4 is not divisible by --tensor-model-parallel-size 3
	//   the MLP hidden size 512 (--ffn-hidden-size, default 4 × hidden) is not divisible by --tensor-model-parallel-size 3
}
