package serve

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// fakeEngine is a deterministic Generator for the server's tests. Its model continues
// every sequence with the id after the last one (id+1 mod vocab) unless Ban forbids it
// (then the next id up); the log-probability of id is -id/100, the alternatives of a
// token are the next TopLogprobs ids with log-probabilities one apart. It refuses with
// ErrBusy beyond maxRunning requests and ErrClosed after Close. With gate set, each
// token waits for a value from it (or the request's cancellation).
type fakeEngine struct {
	vocab, maxLen, maxRunning int
	gate                      chan struct{}

	mu      sync.Mutex
	running int
	closed  bool
	reqs    []Request     // every request submitted
	idle    chan struct{} // closed and replaced when running drops to 0
}

func newFake(vocab, maxLen, maxRunning int) *fakeEngine {
	return &fakeEngine{vocab: vocab, maxLen: maxLen, maxRunning: maxRunning, idle: make(chan struct{})}
}

func (f *fakeEngine) Vocab() int     { return f.vocab }
func (f *fakeEngine) MaxSeqLen() int { return f.maxLen }

func (f *fakeEngine) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

// lp is the fake model's log-probability of id.
func lp(id int32) float32 { return -float32(id) / 100 }

func (f *fakeEngine) Submit(ctx context.Context, r Request) (<-chan Event, error) {
	if len(r.Prompt) == 0 {
		return nil, errors.New("serve: empty prompt")
	}
	if len(r.Prompt)+r.MaxNewTokens > f.maxLen {
		return nil, fmt.Errorf("serve: prompt %d + MaxNewTokens %d > MaxSeqLen %d", len(r.Prompt), r.MaxNewTokens, f.maxLen)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	if f.running >= f.maxRunning {
		return nil, ErrBusy
	}
	f.running++
	f.reqs = append(f.reqs, r)
	ch := make(chan Event)
	go f.run(ctx, r, ch)
	return ch, nil
}

// run generates r's events into ch.
func (f *fakeEngine) run(ctx context.Context, r Request, ch chan<- Event) {
	defer f.finished()
	defer close(ch)
	send := func(ev Event) bool {
		select {
		case ch <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if r.PromptLogprobs {
		pl := make([]float32, len(r.Prompt)-1)
		for i := range pl {
			pl[i] = lp(r.Prompt[i+1])
		}
		if !send(Event{PromptLogprobs: pl}) {
			ch <- Event{Done: true, FinishReason: "cancelled"}
			return
		}
	}
	var gen []int32
	last := r.Prompt[len(r.Prompt)-1]
	for len(gen) < r.MaxNewTokens {
		if f.gate != nil {
			select {
			case <-f.gate:
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			ch <- Event{Done: true, FinishReason: "cancelled"}
			return
		}
		next := (last + 1) % int32(f.vocab)
		if r.Ban != nil {
			for slices.Contains(r.Ban(gen), next) {
				next = (next + 1) % int32(f.vocab)
			}
		}
		tok := &Token{ID: next}
		if r.Logprobs {
			tok.Logprob = lp(next)
		}
		for k := range r.TopLogprobs {
			tok.Top = append(tok.Top, TokenLogprob{ID: (next + int32(k)) % int32(f.vocab), Logprob: lp(next) - float32(k)})
		}
		gen, last = append(gen, next), next
		if !send(Event{Token: tok}) {
			ch <- Event{Done: true, FinishReason: "cancelled"}
			return
		}
		if slices.Contains(r.StopIDs, next) || r.Stop != nil && r.Stop(gen) {
			ch <- Event{Done: true, FinishReason: "stop", Stats: Stats{PromptTokens: len(r.Prompt), GeneratedTokens: len(gen)}}
			return
		}
	}
	ch <- Event{Done: true, FinishReason: "length", Stats: Stats{PromptTokens: len(r.Prompt), GeneratedTokens: len(gen)}}
}

// finished counts a request out.
func (f *fakeEngine) finished() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running--
	if f.running == 0 {
		close(f.idle)
		f.idle = make(chan struct{})
	}
}

// nowRunning returns the number of requests running.
func (f *fakeEngine) nowRunning() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running
}

// idleCh returns a channel closed when no request runs any more.
func (f *fakeEngine) idleCh() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	return f.idle
}
