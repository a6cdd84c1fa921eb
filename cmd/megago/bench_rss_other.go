//go:build !linux

package main

// peakRSSMB returns 0: the peak resident set size is read only on Linux.
func peakRSSMB() float64 { return 0 }
