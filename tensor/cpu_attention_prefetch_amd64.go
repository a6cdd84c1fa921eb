//go:build !purego

package tensor

// attnPrefetch prefetches, into every cache level, lines cache lines (64 bytes) from p
// on. It never faults.
//
//go:noescape
func attnPrefetch(p *float32, lines int)
