//go:build !linux

package procmem

// PeakRSS returns 0: the peak resident set size is read only on Linux.
func PeakRSS() int64 { return 0 }
