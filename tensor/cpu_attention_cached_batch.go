package tensor

import (
	"runtime"
	"sort"
)

// AttentionCachedBatch implements CachedAttentionBatchKernels: the forward kernel of
// cpu_attention.go over the heads of all the calls at once. An item is one head of one
// call, all its query tiles (the last first, as forward orders them); goroutines pull
// items across calls, each with scratch sized for the call with the most key tiles.
// Each tile is computed as in the call's own forward, so the results are the same.
func (cpuBackend) AttentionCachedBatch(as []AttentionArgs, ps []AttentionParams) {
	if computeIs64(as[0].Q.DType) {
		attnCachedBatch[float64](as, ps)
	} else {
		attnCachedBatch[float32](as, ps)
	}
}

func attnCachedBatch[T float](as []AttentionArgs, ps []AttentionParams) {
	calls := make([]*attnCall[T], len(as))
	for i, a := range as {
		calls[i] = newCachedAttnCall[T](a, ps[i])
	}
	attnBatch(calls)
}

// attnBatch runs the forward of calls in one parallel pass over all their heads, taken
// a chunk of consecutive heads at a time (those of one sequence in a decode step, whose
// keys and values lie one after another), as many chunks as leave every goroutine
// attnBatchChunks or more.
func attnBatch[T float](calls []*attnCall[T]) {
	first := make([]int, len(calls)+1) // the items (heads) of calls[i]: [first[i], first[i+1])
	big := 0                           // the call with the most key tiles
	for i, c := range calls {
		c.out, c.lse = output[T](c.a.Out), output[T](c.a.LSE)
		first[i+1] = first[i] + c.b*c.nh
		if c.nkt > calls[big].nkt {
			big = i
		}
	}
	n := first[len(calls)]
	chunk := max(1, min(calls[0].b*calls[0].nh, n/(attnBatchChunks*runtime.GOMAXPROCS(0))))
	attnParallel(n, chunk, func() *attnTiles[T] { return calls[big].newTiles(false) }, func(t *attnTiles[T], it int) {
		ci := sort.SearchInts(first, it+1) - 1 // the call whose items hold it
		if t.kvCall != ci {
			t.kvCall, t.kvHead = ci, -1 // the packed keys are another call's
		}
		c := calls[ci]
		t.nextK = nil
		if (it+1)%chunk != 0 && it+1 < n { // the goroutine's next item
			t.nextK = batchKeys(calls, first, it+1, attnPrefetchRows)
		}
		for qt := c.nqt - 1; qt >= 0; qt-- {
			c.forwardTile(t, it-first[ci], qt)
		}
	})
	for _, c := range calls {
		store(c.a.Out, c.out)
		store(c.a.LSE, c.lse)
	}
}

// attnBatchChunks is the fewest chunks of heads attnBatch leaves each goroutine, so that
// the last chunk taken does not leave the others idle long.
const attnBatchChunks = 4

// attnPrefetchRows is how many of its first keys a one-query head prefetches of the head
// its goroutine attends next: two blocks of the scores kernel, which from there on
// prefetches two blocks ahead itself.
const attnPrefetchRows = 2 * attnRowBlock

// batchKeys returns the first rows (or fewer) keys of item it of attnBatch's calls (whose
// items start at first) in float32, or nil in float64.
func batchKeys[T float](calls []*attnCall[T], first []int, it, rows int) []float32 {
	ci := sort.SearchInts(first, it+1) - 1
	c := calls[ci]
	k, _, _ := c.kvRows(c.kvHeadOf(it-first[ci]), 0, min(rows, c.tk))
	k32, _ := any(k).([]float32)
	return k32
}
