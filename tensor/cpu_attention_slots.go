package tensor

// AttentionSlots implements SlotAttentionKernels: the forward kernel of cpu_attention.go
// over the heads of all the calls in one pass (attnBatch), each call's keys and values
// read in place from their [B, G, L, HS] slots, of which the geometry sees the first Tk
// positions (kvRows, by the slot's strides).
func (cpuBackend) AttentionSlots(as []AttentionArgs, ps []AttentionParams, tk []int) {
	if computeIs64(as[0].Q.DType) {
		attnSlots[float64](as, ps, tk)
	} else {
		attnSlots[float32](as, ps, tk)
	}
}

func attnSlots[T float](as []AttentionArgs, ps []AttentionParams, tk []int) {
	calls := make([]*attnCall[T], len(as))
	for i, a := range as {
		s := a.K.Shape // [B, G, L, HS]
		c := newAttnCall[T](a, ps[i])
		c.tk, c.nkt = tk[i], (tk[i]+attnKTile-1)/attnKTile
		c.kvStr = [3]int{s[1] * s[2] * s[3], s[2] * s[3], s[3]}
		calls[i] = c
	}
	attnBatch(calls)
}
