package ckptlayout_test

import (
	"fmt"
	"path/filepath"

	"megago/internal/ckptlayout"
)

func Example() {
	fmt.Println(filepath.Join("ckpt", ckptlayout.IterDir(150)))
	fmt.Println(filepath.Join("ckpt", ckptlayout.TrackerFile))
	// Output:
	// ckpt/iter_0000150
	// ckpt/latest_checkpointed_iteration.txt
}
