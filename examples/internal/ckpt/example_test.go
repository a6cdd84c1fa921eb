package ckpt_test

import (
	"flag"
	"fmt"

	"megago/examples/internal/ckpt"
)

// The checkpoint flags and the combinations they refuse.
func Example() {
	var f ckpt.Flags
	fs := flag.NewFlagSet("example", flag.ContinueOnError)
	f.Register(fs, "its validation loss")
	_ = fs.Parse([]string{"--save-interval", "100", "--eval-only"})
	for _, msg := range f.Check() {
		fmt.Println(msg)
	}
	// Output:
	// --save-interval needs --save
	// --finetune and --eval-only need --load
}
