package testutil_test

import (
	"fmt"
	"slices"
	"testing"

	"megago/internal/testutil"
	"megago/tensor"
)

func TestForEachBackendRunsCPUAndFake(t *testing.T) {
	var ran []string
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		ran = append(ran, dev.String())
	})
	for _, want := range []string{"cpu", "fake"} {
		if !slices.Contains(ran, want) {
			t.Errorf("ForEachBackend ran %v, missing %q", ran, want)
		}
	}
}

// ForEachBackend runs the body on every registered backend; this package registers "fake"
// besides the CPU backend.
func Example() {
	fmt.Println(tensor.Backends())
	// Output: [cpu fake]
}
