//go:build !linux

package report

// peakRSS returns 0: the peak resident set size is read only on Linux.
func peakRSS() int64 { return 0 }
