package serve

import (
	"context"
	"fmt"
	"sync"
)

// job is one request submitted to the generator.
type job struct {
	events <-chan Event
	cancel context.CancelFunc // ends the request early (client gone, stop string found)
}

// submitAll submits reqs, each under its own child of ctx. If one is refused it cancels
// the ones already submitted and returns the refusal.
func (s *Server) submitAll(ctx context.Context, reqs []Request) ([]job, error) {
	jobs := make([]job, 0, len(reqs))
	for _, r := range reqs {
		jctx, cancel := context.WithCancel(ctx)
		ch, err := s.gen.Submit(jctx, r)
		if err != nil {
			cancel()
			cancelAll(jobs)
			return nil, err
		}
		jobs = append(jobs, job{events: ch, cancel: cancel})
	}
	return jobs, nil
}

// cancelAll cancels jobs and waits for their channels to close.
func cancelAll(jobs []job) {
	for _, j := range jobs {
		j.cancel()
		for range j.events {
		}
	}
}

// outcome is a finished request: the generated ids with their log-probabilities, the
// prompt's log-probabilities, the text (cut before a stop string) and why it ended.
type outcome struct {
	ids      []int32
	logprobs []float32
	tops     [][]TokenLogprob
	prompt   []float32 // log p(prompt[i] | prompt[:i]) for i ≥ 1
	// promptTops are the most likely ids after prompt[:i] for i ≥ 1, when asked for.
	promptTops [][]TokenLogprob
	text       string
	finish     string // "stop", "length"
	err        error  // the request failed (finish "error")
	stats      Stats
}

// collect reads j's events to the end. A stop string found in the text ends the request
// (finish "stop", the text cut before it); a request the generator failed or cancelled
// has err set.
func (s *Server) collect(j job, stops []string, hide []int32) outcome {
	var o outcome
	ts := &textStream{tok: s.tok, stops: stops, hide: hide}
	for ev := range j.events {
		switch {
		case ev.PromptLogprobs != nil:
			o.prompt, o.promptTops = ev.PromptLogprobs, ev.PromptTopLogprobs
		case ev.Token != nil && !ts.stopped:
			o.ids = append(o.ids, ev.Token.ID)
			o.logprobs = append(o.logprobs, ev.Token.Logprob)
			o.tops = append(o.tops, ev.Token.Top)
			if _, stop := ts.push(ev.Token.ID); stop {
				j.cancel() // the rest of the events are drained by the loop
			}
		}
		if ev.Done {
			o.finish, o.stats = ev.FinishReason, ev.Stats
			if ev.Err != nil {
				o.err = ev.Err
			} else if ev.FinishReason == "cancelled" && !ts.stopped {
				o.err = fmt.Errorf("serve: request cancelled")
			}
		}
	}
	ts.flush()
	o.text = ts.text
	if ts.stopped {
		o.finish, o.err = "stop", nil
	}
	return o
}

// collectAll runs collect on every job at once and returns their outcomes in order.
func (s *Server) collectAll(jobs []job, stops []string, hide []int32) []outcome {
	out := make([]outcome, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = s.collect(j, stops, hide)
		}()
	}
	wg.Wait()
	return out
}

// firstErr returns the first outcome's error, if any.
func firstErr(out []outcome) error {
	for _, o := range out {
		if o.err != nil {
			return o.err
		}
	}
	return nil
}

// segments returns the text of each id decoded alone (Megatron's segments, OpenAI's
// logprobs tokens).
func (s *Server) segments(ids []int32) []string {
	seg := make([]string, len(ids))
	for i, id := range ids {
		seg[i] = s.tok.Decode([]int32{id})
	}
	return seg
}
