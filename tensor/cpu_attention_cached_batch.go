package tensor

import "sort"

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

// attnBatch runs the forward of calls in one parallel pass over all their heads.
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
	attnParallel(first[len(calls)], 1, func() *attnTiles[T] { return calls[big].newTiles(false) }, func(t *attnTiles[T], it int) {
		ci := sort.SearchInts(first, it+1) - 1 // the call whose items hold it
		if t.kvCall != ci {
			t.kvCall, t.kvHead = ci, -1 // the packed keys are another call's
		}
		c := calls[ci]
		for qt := c.nqt - 1; qt >= 0; qt-- {
			c.forwardTile(t, it-first[ci], qt)
		}
	})
	for _, c := range calls {
		store(c.a.Out, c.out)
		store(c.a.LSE, c.lse)
	}
}
