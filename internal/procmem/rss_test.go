package procmem

import (
	"runtime"
	"testing"
)

// TestPeakRSSCoversAllocation: after touching 64 MiB the peak resident set is at least
// that (on Linux; elsewhere PeakRSS reports 0).
func TestPeakRSSCoversAllocation(t *testing.T) {
	const n = 64 << 20
	b := make([]byte, n)
	for i := 0; i < n; i += 4096 {
		b[i] = 1
	}
	got := PeakRSS()
	runtime.KeepAlive(b)
	if runtime.GOOS != "linux" {
		if got != 0 {
			t.Errorf("PeakRSS = %d off Linux, want 0", got)
		}
		return
	}
	if got < n {
		t.Errorf("PeakRSS = %d bytes after touching %d", got, n)
	}
}
