package serve

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// LoadOptions configures RunLoad: Clients closed-loop clients share Requests requests,
// each a random prompt of PromptLen ids below Vocab asking for exactly NewTokens greedy
// tokens (no stop ids).
type LoadOptions struct {
	Clients, Requests    int
	PromptLen, NewTokens int
	Vocab                int
	Seed                 uint64
}

// LoadReport is what RunLoad measured. Throughput counts generated tokens; latencies are
// per request, from Submit to its first token (TTFT) and to its Done event.
type LoadReport struct {
	Clients         int     `json:"clients"`
	Requests        int     `json:"requests"`
	PromptLen       int     `json:"prompt_tokens"`
	NewTokens       int     `json:"new_tokens"`
	Seconds         float64 `json:"seconds"`
	TokensPerSecond float64 `json:"tokens_per_s"`
	TTFTP50Ms       float64 `json:"ttft_p50_ms"`
	TTFTP99Ms       float64 `json:"ttft_p99_ms"`
	LatencyP50Ms    float64 `json:"latency_p50_ms"`
	LatencyP99Ms    float64 `json:"latency_p99_ms"`
}

// RunLoad drives e with o's clients, each submitting its next request as soon as the
// previous one is done (a bounded, closed-loop load), and reports throughput and latency
// percentiles. It returns the first request error (ErrBusy included: size the engine's
// queue for the clients).
func RunLoad(ctx context.Context, e *Engine, o LoadOptions) (LoadReport, error) {
	if err := o.check("RunLoad"); err != nil {
		return LoadReport{}, err
	}
	return closedLoop(ctx, o, func(ctx context.Context, i int) (Stats, error) { return loadRequest(ctx, e, o, i) })
}

// check returns an error if o cannot make a load; fn names the caller.
func (o LoadOptions) check(fn string) error {
	if o.Clients < 1 || o.Requests < o.Clients || o.PromptLen < 1 || o.NewTokens < 1 || o.Vocab < 1 {
		return fmt.Errorf("serve: %s: invalid %+v", fn, o)
	}
	return nil
}

// closedLoop runs o.Requests requests with do on o.Clients clients, client c sending
// requests c, c+Clients, ... one after another, and reports throughput (generated
// tokens over the wall time) and the percentiles of the requests' Stats. It returns
// the requests' errors, joined.
func closedLoop(ctx context.Context, o LoadOptions, do func(ctx context.Context, i int) (Stats, error)) (LoadReport, error) {
	stats := make([]Stats, o.Requests)
	errs := make([]error, o.Clients)
	start := time.Now()
	var wg sync.WaitGroup
	for c := range o.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; i < o.Requests && errs[c] == nil; i += o.Clients {
				stats[i], errs[c] = do(ctx, i)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return LoadReport{}, err
	}
	ttft, total := make([]float64, len(stats)), make([]float64, len(stats))
	tokens := 0
	for i, s := range stats {
		ttft[i], total[i] = ms(s.TimeToFirst), ms(s.Total)
		tokens += s.GeneratedTokens
	}
	return LoadReport{Clients: o.Clients, Requests: o.Requests, PromptLen: o.PromptLen, NewTokens: o.NewTokens,
		Seconds: elapsed.Seconds(), TokensPerSecond: float64(tokens) / elapsed.Seconds(),
		TTFTP50Ms: percentile(ttft, 50), TTFTP99Ms: percentile(ttft, 99),
		LatencyP50Ms: percentile(total, 50), LatencyP99Ms: percentile(total, 99)}, nil
}

// loadPrompt returns request i's prompt: o.PromptLen ids below o.Vocab drawn from o.Seed.
func loadPrompt(o LoadOptions, i int) []int32 {
	r := rand.New(rand.NewPCG(o.Seed, uint64(i)))
	prompt := make([]int32, o.PromptLen)
	for j := range prompt {
		prompt[j] = int32(r.IntN(o.Vocab))
	}
	return prompt
}

// loadRequest runs request i of a load and returns its stats.
func loadRequest(ctx context.Context, e *Engine, o LoadOptions, i int) (Stats, error) {
	ch, err := e.Submit(ctx, Request{Prompt: loadPrompt(o, i), MaxNewTokens: o.NewTokens})
	if err != nil {
		return Stats{}, fmt.Errorf("request %d: %w", i, err)
	}
	for ev := range ch {
		if ev.Done {
			if ev.Err != nil {
				return ev.Stats, fmt.Errorf("request %d: %w", i, ev.Err)
			}
			return ev.Stats, nil
		}
	}
	return Stats{}, fmt.Errorf("request %d: stream closed without Done", i)
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// percentile returns the p-th percentile of x (nearest rank), 0 for none.
func percentile(x []float64, p float64) float64 {
	if len(x) == 0 {
		return 0
	}
	s := slices.Clone(x)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
