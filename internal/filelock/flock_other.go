//go:build !unix

package filelock

import "os"

// Supported reports whether this platform has file locks.
const Supported = false

// TryLock does nothing on this platform (see Supported).
func TryLock(f *os.File) error { return nil }

// Lock does nothing on this platform (see Supported).
func Lock(f *os.File) error { return nil }
