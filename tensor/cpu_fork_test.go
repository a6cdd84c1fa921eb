package tensor

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunChunks checks that every index runs once, in chunks of the given size, and that
// a panic in any chunk reaches the caller.
func TestRunChunks(t *testing.T) {
	cases := []struct{ n, chunk, workers int }{
		{1, 1, 2}, {10, 3, 2}, {37, 1, 3}, {100, 40, 4}, {5, 10, 2}, {1000, 7, 8},
	}
	for _, c := range cases {
		counts := make([]atomic.Int32, c.n)
		runChunks(c.n, c.chunk, c.workers, func(lo, hi int) {
			if lo%c.chunk != 0 || hi-lo > c.chunk || hi > c.n {
				t.Errorf("%+v: chunk [%d, %d)", c, lo, hi)
			}
			for i := lo; i < hi; i++ {
				counts[i].Add(1)
			}
		})
		for i := range counts {
			if k := counts[i].Load(); k != 1 {
				t.Fatalf("%+v: index %d ran %d times", c, i, k)
			}
		}
		func() {
			defer func() {
				if r := recover(); r != "chunk 0" {
					t.Fatalf("%+v: recovered %v, want the panic of chunk 0", c, r)
				}
			}()
			runChunks(c.n, c.chunk, c.workers, func(lo, _ int) {
				if lo == 0 {
					panic("chunk 0")
				}
			})
		}()
	}
}

// TestHelpersStopSpinning checks that at most one helper per other CPU spins after a
// burst of forks, and that they all stop once no fork comes.
func TestHelpersStopSpinning(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	for range 50 {
		runChunks(64, 1, 4, func(lo, hi int) {})
		if n, most := helpers.spinning.Load(), max(0, min(runtime.NumCPU(), 4)-1); int(n) > most {
			t.Fatalf("%d helpers spinning, want at most %d", n, most)
		}
	}
	deadline := time.Now().Add(10 * time.Second) // helperSpin is microseconds; this only bounds a hang
	for helpers.spinning.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d helpers still spinning", helpers.spinning.Load())
		}
		time.Sleep(time.Millisecond)
	}
}
