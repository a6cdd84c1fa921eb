package serve

import (
	"context"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// blockAt returns a Stop function that, after the request's first token, signals reached
// and waits for proceed: the scheduler (and so the engine) stands still meanwhile.
func blockAt(reached, proceed chan struct{}) func([]int32) bool {
	return func(gen []int32) bool {
		if len(gen) == 1 {
			close(reached)
			<-proceed
		}
		return false
	}
}

func TestEngineCancelFreesSlot(t *testing.T) {
	e := testEngine(t, testModels(t, testConfigs()["gpt2"], 1), EngineConfig{MaxRequests: 1, MaxSeqLen: 32})
	ctx, cancel := context.WithCancel(context.Background())
	reached, proceed := make(chan struct{}), make(chan struct{})
	a, err := e.Submit(ctx, Request{Prompt: []int32{1, 2, 3}, MaxNewTokens: 29, Stop: blockAt(reached, proceed)})
	require.NoError(t, err)
	<-reached
	cancel()
	close(proceed)
	ra := collect(t, a)
	require.Equal(t, "cancelled", ra.done.FinishReason)
	require.ErrorIs(t, ra.done.Err, context.Canceled)
	require.Len(t, ra.ids, 1, "the cancelled request stops at the next step")
	// The only slot is free again.
	b, err := e.Submit(context.Background(), Request{Prompt: []int32{4}, MaxNewTokens: 3})
	require.NoError(t, err)
	rb := collect(t, b)
	require.Equal(t, "length", rb.done.FinishReason)
	require.Len(t, rb.ids, 3)
}

func TestEngineBusyAndClose(t *testing.T) {
	e, err := NewEngine(testModels(t, testConfigs()["gpt2"], 1), EngineConfig{MaxRequests: 1, MaxQueue: 1, MaxSeqLen: 32})
	require.NoError(t, err)
	reached, proceed := make(chan struct{}), make(chan struct{})
	a, err := e.Submit(context.Background(), Request{Prompt: []int32{1}, MaxNewTokens: 4, Stop: blockAt(reached, proceed)})
	require.NoError(t, err)
	<-reached // a holds the only slot
	b, err := e.Submit(context.Background(), Request{Prompt: []int32{2, 3}, MaxNewTokens: 5})
	require.NoError(t, err, "one request may wait")
	_, err = e.Submit(context.Background(), Request{Prompt: []int32{4}, MaxNewTokens: 1})
	require.ErrorIs(t, err, ErrBusy)
	closed := make(chan error)
	go func() { closed <- e.Close() }()
	close(proceed)
	// Close drains: the running and the queued request finish in full.
	for _, c := range []struct {
		ch <-chan Event
		n  int
	}{{a, 4}, {b, 5}} {
		r := collect(t, c.ch)
		require.Equal(t, "length", r.done.FinishReason)
		require.Len(t, r.ids, c.n)
		require.Equal(t, c.n, r.done.Stats.GeneratedTokens)
	}
	require.NoError(t, <-closed)
	_, err = e.Submit(context.Background(), Request{Prompt: []int32{4}, MaxNewTokens: 1})
	require.ErrorIs(t, err, ErrClosed)
}

func TestEngineValidation(t *testing.T) {
	e := testEngine(t, testModels(t, testConfigs()["gpt2"], 1), EngineConfig{MaxSeqLen: 16})
	for _, c := range []struct {
		name, field string
		r           Request
	}{
		{"empty prompt", "Prompt", Request{MaxNewTokens: 1}},
		{"negative id", "Prompt[1]", Request{Prompt: []int32{1, -1}, MaxNewTokens: 1}},
		{"id past vocab", "Prompt[0]", Request{Prompt: []int32{100}, MaxNewTokens: 1}},
		{"negative new tokens", "MaxNewTokens", Request{Prompt: []int32{1}, MaxNewTokens: -1}},
		{"too long", "MaxSeqLen", Request{Prompt: make([]int32, 10), MaxNewTokens: 7}},
		{"top logprobs", "TopLogprobs", Request{Prompt: []int32{1}, MaxNewTokens: 1, TopLogprobs: 21}},
		{"prompt top logprobs without prompt logprobs", "PromptTopLogprobs", Request{Prompt: []int32{1, 2}, PromptTopLogprobs: 1}},
		{"temperature", "Temperature", Request{Prompt: []int32{1}, MaxNewTokens: 1, Sampling: Sampling{Temperature: -1}}},
		{"top p", "TopP", Request{Prompt: []int32{1}, MaxNewTokens: 1, Sampling: Sampling{TopP: 2}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.Submit(context.Background(), c.r)
			require.ErrorContains(t, err, c.field)
		})
	}
}

// TestEnginePromptLogprobs: echo with max_tokens 0 returns log softmax of a full forward's
// logits at each prompt position, taken at the next prompt token.
func TestEnginePromptLogprobs(t *testing.T) {
	models := testModels(t, testConfigs()["gpt2"], 1)
	m := models[0]
	e := testEngine(t, models, EngineConfig{MaxSeqLen: 40, PrefillChunk: 6})
	prompt := variedPrompts(1, 1, 100, 9)[0]
	for len(prompt) < 23 {
		prompt = append(prompt, int32(len(prompt)*13%100))
	}
	const nTop = 3
	r := submitAll(t, e, []Request{{Prompt: prompt, PromptLogprobs: true, PromptTopLogprobs: nTop}})[0]
	require.Equal(t, "length", r.done.FinishReason)
	require.Empty(t, r.ids)

	lsm := logSoftmaxRows(m, prompt) // [T][V]
	require.Len(t, r.prompt, len(prompt)-1)
	for i := 1; i < len(prompt); i++ {
		row := lsm[i-1]
		// The same float32 logits; only the float32 rounding of the result differs.
		require.InDelta(t, row[prompt[i]], float64(r.prompt[i-1]), 1e-5, "prompt token %d", i)
		// The most likely ids at position i: the reference row sorted.
		ids := make([]int, len(row))
		for k := range ids {
			ids[k] = k
		}
		sort.Slice(ids, func(a, b int) bool { return row[ids[a]] > row[ids[b]] })
		require.Len(t, r.promptTop[i-1], nTop, "prompt position %d", i)
		for k, got := range r.promptTop[i-1] {
			require.Equal(t, int32(ids[k]), got.ID, "prompt position %d, alternative %d", i, k)
			require.InDelta(t, row[ids[k]], float64(got.Logprob), 1e-5, "prompt position %d, alternative %d", i, k)
		}
	}
}

// TestEngineStopAndBan: a stop id ends generation after it (included); a banned id is
// never chosen.
func TestEngineStopAndBan(t *testing.T) {
	models := testModels(t, testConfigs()["llama-gqa"], 1)
	e := testEngine(t, models, EngineConfig{MaxSeqLen: 32})
	prompt := []int32{5, 6, 7}
	free := submitAll(t, e, []Request{{Prompt: prompt, MaxNewTokens: 8}})[0].ids
	stopped := submitAll(t, e, []Request{{Prompt: prompt, MaxNewTokens: 8, StopIDs: []int32{free[2]}}})[0]
	require.Equal(t, "stop", stopped.done.FinishReason)
	require.Equal(t, free[:indexOf(free, free[2])+1], stopped.ids)
	ban := func([]int32) []int32 { return []int32{free[0]} }
	banned := submitAll(t, e, []Request{{Prompt: prompt, MaxNewTokens: 8, Ban: ban}})[0]
	require.NotContains(t, banned.ids, free[0])
}

func indexOf(x []int32, v int32) int {
	for i, y := range x {
		if y == v {
			return i
		}
	}
	return -1
}
