package nccl_test

import (
	"errors"
	"fmt"

	"megago/cuda/internal/dl"
	"megago/cuda/internal/nccl"
)

// Where the library is not installed, Load returns an error (never a crash), which
// callers can tell apart with errors.Is.
func ExampleLoad() {
	nowhere := dl.SearchEnv{
		Getenv: func(string) string { return "" },
		Glob:   func(string) ([]string, error) { return nil, nil },
		Exists: func(string) bool { return false },
		GOARCH: "amd64",
	}
	_, err := nccl.Load(nowhere)
	fmt.Println("error:", err != nil)
	fmt.Println("no device:", errors.Is(err, dl.ErrNoDevice))
	// Output:
	// error: true
	// no device: true
}
