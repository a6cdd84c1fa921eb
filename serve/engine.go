package serve

import (
	"context"
	"errors"
	"time"

	"megago/nn"
)

// EngineConfig configures NewEngine. A zero field takes its default.
type EngineConfig struct {
	MaxRequests  int // slots of the KV cache: requests running at once; default 8
	MaxSeqLen    int // positions per slot (prompt + generated); default 2560
	MaxQueue     int // requests waiting for a slot before Submit returns ErrBusy; default 4*MaxRequests
	PrefillChunk int // most prompt tokens per step; 0 = the engine's choice
}

// Sampling chooses how a request's next token is picked from its logits.
type Sampling struct {
	Temperature float64 // 0 = greedy (argmax)
	TopK        int     // keep the k most likely ids; 0 = all
	TopP        float64 // keep the smallest set with probability ≥ TopP; 0 = all
	// TopPDecay and TopPBound are Megatron's: after each generated token
	// TopP = max(TopP·TopPDecay, TopPBound) when TopPDecay > 0.
	TopPDecay, TopPBound float64
	Seed                 uint64 // the request's own random stream: its tokens do not depend on other requests
}

// Request is one prompt to continue.
type Request struct {
	Prompt         []int32
	MaxNewTokens   int                             // 0 allowed: only prompt logprobs
	Sampling       Sampling                        // how to pick each token
	StopIDs        []int32                         // generation ends after emitting one (included)
	Stop           func(generated []int32) bool    // optional, called after each token (Megatron's stop_on_eol etc.)
	Ban            func(generated []int32) []int32 // optional ids forbidden at the next step (prevent_newline_after_colon)
	Logprobs       bool                            // log-probability of each generated token
	PromptLogprobs bool                            // log-probabilities of prompt tokens 1..n-1 (echo)
	TopLogprobs    int                             // also the n most likely ids with their logprobs per generated token, ≤ 20
}

// Token is one generated token.
type Token struct {
	ID      int32
	Logprob float32        // when Request.Logprobs
	Top     []TokenLogprob // when Request.TopLogprobs > 0, most likely first
}

// TokenLogprob is an id with its log-probability.
type TokenLogprob struct {
	ID      int32
	Logprob float32
}

// Stats describes a finished request.
type Stats struct {
	PromptTokens    int
	GeneratedTokens int
	TimeToFirst     time.Duration // from Submit to the first generated token (or to prompt logprobs)
	Total           time.Duration // from Submit to Done
}

// Event is delivered on a request's channel: PromptLogprobs once first when asked, then
// tokens as they are generated, then one final Event with Done set (FinishReason "stop",
// "length", "cancelled" or "error", with Err).
type Event struct {
	Token          *Token
	PromptLogprobs []float32 // log p(prompt[i] | prompt[:i]) for i = 1..n-1
	Done           bool
	FinishReason   string
	Err            error
	Stats          Stats // with Done
}

// Errors returned by Submit.
var (
	ErrBusy   = errors.New("serve: engine busy: request queue is full")
	ErrClosed = errors.New("serve: engine closed")
)

// Engine runs continuous batching over a TP group of models.
type Engine struct {
	models []*nn.GPT
	cfg    EngineConfig
}

// NewEngine starts an engine over the TP ranks' models (len(models) = TP size, goroutine
// ranks; models[i] on rank i of its TP group). Close stops it.
func NewEngine(models []*nn.GPT, cfg EngineConfig) (*Engine, error) {
	return nil, errors.New("serve: not implemented yet")
}

// Close refuses new requests, finishes running and queued ones, and returns.
func (e *Engine) Close() error { return nil }

// Vocab returns the true vocabulary size (ids ≥ it are invalid).
func (e *Engine) Vocab() int { return e.models[0].Config.Vocab }

// MaxSeqLen returns the positions per slot: prompt + MaxNewTokens must not exceed it.
func (e *Engine) MaxSeqLen() int { return e.cfg.MaxSeqLen }

// Submit queues r; the returned channel yields its events and is closed after the Done
// event. Cancelling ctx (client gone) frees its slot at the next step. Errors: ErrBusy
// (queue full), ErrClosed, or a validation error naming the field (empty prompt, id out of
// range, prompt+MaxNewTokens > MaxSeqLen).
func (e *Engine) Submit(ctx context.Context, r Request) (<-chan Event, error) {
	return nil, ErrClosed
}
