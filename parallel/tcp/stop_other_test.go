//go:build !unix

package tcp

import (
	"testing"

	"megago/parallel"
)

// workerStop needs SIGSTOP, which only Unix systems have.
func workerStop(t *testing.T, _ parallel.Comm, _ string) {
	t.Skip("needs SIGSTOP (Unix)")
}
