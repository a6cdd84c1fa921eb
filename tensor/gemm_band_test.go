package tensor

import "testing"

// TestGemmBandFor checks the band widths of sgemmSplit against widths worked out by hand:
// gemmBand's 2 bands a goroutine unless a band would exceed gemmBandWork multiply-adds,
// then narrower, but never under gemmMinBandUnits tiles.
func TestGemmBandFor(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		ext, unit, workers, mac int
		want                    int
	}{
		// 453M multiply-adds: 2 bands of 1.7·gemmBandWork do not beat 4 bands.
		{"qkv columns", 2304, 32, 2, 256 * 768 * 2304, 576},
		// 9.9G: 37 bands of 50304/37 → 1360 → 1376 columns (43 tiles of 32).
		{"LM head columns", 50304, 32, 2, 256 * 768 * 50304, 1376},
		// The same work cut along its 50304 rows: 1360 rounded up to 12-row panels.
		{"LM head rows", 50304, 12, 2, 256 * 768 * 50304, 1368},
		// 768 columns: 16 tiles of 32 already exceed 4 bands' 192, so 192 stays.
		{"LM head dx", 768, 32, 2, 256 * 768 * 50304, 192},
		// 4 workers, 4096 columns of 2^31 multiply-adds: 8 bands of 512 as gemmBand.
		{"four workers", 4096, 32, 4, 1 << 31, 512},
		// One worker, 2^30: 4 bands of gemmBandWork would be 256 columns, 8 tiles: 16
		// tiles (512) instead, gemmBand's 2 bands.
		{"one worker", 1024, 32, 1, 1 << 30, 512},
		// One worker, 2^32 over 8192 columns: 16 bands of 512.
		{"one worker wide", 8192, 32, 1, 1 << 32, 512},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := gemmBandFor(tc.ext, tc.unit, tc.workers, tc.mac); got != tc.want {
				t.Errorf("gemmBandFor(%d, %d, %d, %d) = %d, want %d", tc.ext, tc.unit, tc.workers, tc.mac, got, tc.want)
			}
		})
	}
}
