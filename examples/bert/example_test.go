package main

import (
	"context"
	"fmt"
	"io"
)

// Bad settings stop a run with one message, before any work starts.
func Example() {
	args := []string{"--ranks", "2", "--pipeline-model-parallel-size", "3", "--mask-prob", "1.5", "--finetune-classify"}
	_, err := run(context.Background(), args, func(string) string { return "" }, io.Discard, io.Discard)
	fmt.Println(err)
	// Output:
	// invalid settings:
	//   2 ranks do not divide into TP=1 × PP=3
	//   --mask-prob 1.5 is outside (0, 1]
	//   --finetune-classify needs --load: the directory of a pretrained BERT (go run ./examples/bert --save DIR)
}
