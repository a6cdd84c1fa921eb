//go:build linux

package procmem

import "syscall"

// PeakRSS returns the process's peak resident set size in bytes (getrusage's maxrss,
// which Linux counts in KiB), or 0 if it cannot be read.
func PeakRSS() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return int64(ru.Maxrss) * 1024
}
