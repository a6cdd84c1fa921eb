package cuda

import "testing"

// openEmulatedBackend returns a backend on the kernel emulator when it is enabled
// (see emulator_test.go), else nil.
func openEmulatedBackend(t *testing.T) *Backend {
	t.Helper()
	return nil
}
