package testutil

import (
	"testing"

	_ "megago/internal/fakedev" // registers the "fake" backend
	"megago/tensor"
)

// ForEachBackend runs body as a subtest, named after the backend, on a fresh device of
// every registered backend (tensor.Backends). A backend that cannot be opened here (a GPU
// backend on a machine without a GPU) is skipped with the error as the message.
func ForEachBackend(t *testing.T, body func(t *testing.T, dev *tensor.Device)) {
	t.Helper()
	for _, name := range tensor.Backends() {
		t.Run(name, func(t *testing.T) {
			dev, err := tensor.Open(name)
			if err != nil {
				t.Skipf("needs backend %s: %v", name, err)
			}
			body(t, dev)
		})
	}
}
