//go:build linux

package main

import "syscall"

// peakRSSMB returns the process's peak resident set size in MiB (getrusage's maxrss,
// which Linux counts in KiB), or 0 if it cannot be read.
func peakRSSMB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Maxrss) / 1024
}
