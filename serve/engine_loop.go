package serve

import (
	"time"

	"megago/nn"
)

// stepPlan is one engine step: the new tokens of every sequence that runs in it.
type stepPlan struct {
	ids    []int32        // [N] new tokens, sequences in order
	seqs   []nn.DecodeSeq // where each sequence's tokens go and which logits it needs
	owners []*seq         // the request of each entry of seqs
}

// loop is the scheduler: until the engine is closed and has drained, it admits queued
// requests into free slots, drops cancelled ones, and runs a step over the rest.
func (e *Engine) loop() {
	defer close(e.done)
	defer e.stopRanks()
	free := make([]int, e.cfg.MaxRequests) // free slots, the lowest last
	for i := range free {
		free[i] = len(free) - 1 - i
	}
	var running []*seq
	for {
		e.mu.Lock()
		for len(free) > 0 && len(e.queue) > 0 {
			s := e.queue[0]
			e.queue = e.queue[1:]
			s.slot, free = free[len(free)-1], free[:len(free)-1]
			running = append(running, s)
		}
		closed, failed := e.closed, e.err
		e.mu.Unlock()
		running, free = e.reap(running, free, failed)
		if len(running) == 0 {
			if closed || failed != nil {
				e.failQueued()
				return
			}
			if e.idle() {
				if _, err := e.run(stepPlan{}); err != nil {
					e.fail(nil, err)
				}
			}
			continue
		}
		plan := e.plan(running)
		rows, err := e.run(plan)
		if err != nil {
			e.fail(running, err)
			running, free = nil, nil
			continue
		}
		running, free = e.advance(running, free, plan, rows)
	}
}

// idle waits for work. With process ranks (NewLeaderEngine) it returns true when
// Heartbeat has passed without any: the followers are due an empty plan.
func (e *Engine) idle() bool {
	if e.ranks[0].leader == nil {
		<-e.wake
		return false
	}
	t := time.NewTimer(e.cfg.Heartbeat)
	defer t.Stop()
	select {
	case <-e.wake:
		return false
	case <-t.C:
		return true
	}
}

// fail records err as the reason the engine stops and finishes the running requests
// with it.
func (e *Engine) fail(running []*seq, err error) {
	e.mu.Lock()
	e.err = err
	e.mu.Unlock()
	for _, s := range running {
		s.finish("error", err)
	}
	clear(e.tops)
}

// reap finishes the running requests whose client has gone (or all of them, with the
// engine's error) and returns the others and the free slots.
func (e *Engine) reap(running []*seq, free []int, failed error) ([]*seq, []int) {
	kept := running[:0]
	for _, s := range running {
		switch {
		case failed != nil:
			s.finish("error", failed)
			delete(e.tops, s)
		case s.ctx.Err() != nil:
			s.finish("cancelled", s.ctx.Err())
			free = append(free, s.slot)
			delete(e.tops, s)
		default:
			kept = append(kept, s)
		}
	}
	return kept, free
}

// failQueued finishes the requests still queued when the engine stops: "error" after a
// failure (Close lets the queue drain otherwise, so none is left).
func (e *Engine) failQueued() {
	e.mu.Lock()
	q, err := e.queue, e.err
	e.queue, e.closed = nil, true
	e.mu.Unlock()
	if err == nil {
		err = ErrClosed
	}
	for _, s := range q {
		s.finish("error", err)
	}
}

// plan builds the next step: one token of every decoding request, then prompt chunks of
// prefilling ones in admission order (prefillBudget). A chunk asks for the logits of
// all its tokens with PromptLogprobs, else of its last token when it ends the prompt and
// tokens are to be generated.
func (e *Engine) plan(running []*seq) stepPlan {
	var p stepPlan
	budget := 0
	for pass := 0; pass < 2; pass++ { // decoding requests first
		if pass == 1 {
			budget = prefillBudget(e.cfg.PrefillChunk, len(p.ids))
		}
		for _, s := range running {
			if s.prefilling() != (pass == 1) {
				continue
			}
			todo := s.pending()
			if pass == 1 {
				if budget == 0 {
					break
				}
				todo = todo[:min(len(todo), budget)]
				budget -= len(todo)
			}
			d := nn.DecodeSeq{Slot: s.slot, Past: s.fed, N: len(todo)}
			switch {
			case s.req.PromptLogprobs && s.prefilling():
				d.Logits = d.N
			case s.fed+d.N == len(s.tokens) && s.req.MaxNewTokens > s.generations:
				d.Logits = 1
			}
			p.ids = append(p.ids, todo...)
			p.seqs = append(p.seqs, d)
			p.owners = append(p.owners, s)
		}
	}
	return p
}

// prefillBudget returns how many prompt tokens a step with decoding tokens may carry:
// what fills it up to chunk tokens in all, but at least half of chunk. A step that
// prefills then has the same size (chunk) whatever the number of decoding requests, so
// the device's pool, which reuses a buffer only for a tensor of the same size, serves
// its activations from the buffers of the previous such step: with the prompt tokens
// alone bounded, every change in the number of decoding requests made each of a step's
// temporaries a fresh allocation whose pages the kernel faulted in (~15K minor faults
// and +25% time per 512-token step of a GPT-2-124M model).
func prefillBudget(chunk, decoding int) int {
	return max(chunk-decoding, (chunk+1)/2)
}
