package serve

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// stepChoice is what a step's logits decide for one request of its plan: the
// log-probabilities (and most likely ids) at its prompt positions, and its next token
// when one is due.
type stepChoice struct {
	rows [][]float64 // the request's logits rows [Logits][V], of positions from, from+1, ...
	from int
	pick []float64 // the logits to draw the next token from (Ban applied); nil when none is due

	promptLP []float32        // the prompt log-probabilities at rows' positions
	tops     [][]TokenLogprob // and their most likely ids
	tok      Token
	err      error
}

// decide computes c for s from its rows. It writes only c, so that advance decides for
// the requests of a step in parallel.
func (c *stepChoice) decide(s *seq) {
	if s.prefilling() && s.req.PromptLogprobs {
		c.promptLP = promptLogprobs(s, c.from, c.rows)
		c.tops = promptTopsAt(s, c.from, c.rows)
	}
	if c.pick != nil {
		c.tok, c.err = s.choose(c.pick, c.rows[len(c.rows)-1])
	}
}

// advance applies a step's logits rows ([R][V], in plan order) to its requests: prompt
// log-probabilities, then, once a request's tokens are all in the cache, its next token.
// It returns the requests still running and the free slots.
//
// The requests' choices (stepChoice.decide: log-softmax, argmax or sampling over the
// vocabulary, a few milliseconds of one core for 32 requests of GPT-2's) are computed in
// parallel; Ban before them and everything that changes a request or sends its events
// after them run here, in plan order, so the events are the same as one by one.
func (e *Engine) advance(running []*seq, free []int, p stepPlan, rows [][]float64) ([]*seq, []int) {
	cs := make([]stepChoice, len(p.owners))
	r := 0
	for i, s := range p.owners {
		d, c := p.seqs[i], &cs[i]
		c.rows, c.from = rows[r:r+d.Logits], d.Past+d.N-d.Logits
		r += d.Logits
		if d.Past+d.N == len(s.tokens) && s.generations < s.req.MaxNewTokens {
			c.pick = s.banned(c.rows[len(c.rows)-1])
		}
	}
	forEach(len(cs), func(i int) { cs[i].decide(p.owners[i]) })
	for i, s := range p.owners {
		d, c := p.seqs[i], &cs[i]
		s.promptLP = append(s.promptLP, c.promptLP...)
		e.tops.add(s, c.tops)
		s.fed += d.N
		if s.fed < len(s.tokens) {
			continue // more prompt to come
		}
		e.sendPrompt(s)
		switch {
		case c.pick == nil: // s.generations ≥ MaxNewTokens
			s.finish("length", nil)
		case c.err != nil:
			s.finish("error", fmt.Errorf("serve: request in slot %d, token %d: %w", s.slot, s.generations, c.err))
		default:
			if end, reason := s.emit(c.tok); end {
				s.finish(reason, nil)
			}
		}
	}
	kept := running[:0]
	for _, s := range running {
		if s.done {
			free = append(free, s.slot)
		} else {
			kept = append(kept, s)
		}
	}
	return kept, free
}

// forEach runs f(0), ..., f(n−1) on up to GOMAXPROCS goroutines (the caller's among
// them), each taking the next index when done with one, and returns when all have
// returned.
func forEach(n int, f func(i int)) {
	var next atomic.Int64
	work := func() {
		for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
			f(i)
		}
	}
	var wg sync.WaitGroup
	for range min(n, runtime.GOMAXPROCS(0)) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
}
