package serve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// EngineConfig configures NewEngine. A zero field takes its default.
type EngineConfig struct {
	MaxRequests  int // slots of the KV cache: requests running at once; default 8
	MaxSeqLen    int // positions per slot (prompt + generated); default 2560
	MaxQueue     int // requests waiting for a slot before Submit returns ErrBusy; default 4*MaxRequests
	PrefillChunk int // most tokens of a step with prompt tokens, decoding ones included (prefillBudget); 0 = 512
	// MemoryBudget, if > 0, is the most bytes the KV cache may take per rank: NewEngine
	// refuses a configuration whose cache (Engine.CacheBytes) exceeds it.
	MemoryBudget int64
	// Heartbeat (NewLeaderEngine) is the longest rank 0 leaves the followers without a
	// broadcast while idle: it then sends an empty plan, so that their wait for the next
	// plan never reaches the transport's timeout (tcp.Config.Timeout, 5 minutes by
	// default: keep Heartbeat below it); default 10 s.
	Heartbeat time.Duration
}

// Defaults used for zero EngineConfig fields.
const (
	DefaultMaxRequests  = 8
	DefaultMaxSeqLen    = 2560
	DefaultPrefillChunk = 512
	DefaultHeartbeat    = 10 * time.Second
	// MaxTopLogprobs is the most alternatives Request.TopLogprobs may ask for.
	MaxTopLogprobs = 20
)

// withDefaults returns c with zero fields set to their defaults; maxPos (> 0) bounds the
// default MaxSeqLen (a model with learned positions has no more).
func (c EngineConfig) withDefaults(maxPos int) EngineConfig {
	if c.MaxRequests == 0 {
		c.MaxRequests = DefaultMaxRequests
	}
	if c.MaxSeqLen == 0 {
		c.MaxSeqLen = DefaultMaxSeqLen
		if maxPos > 0 {
			c.MaxSeqLen = min(c.MaxSeqLen, maxPos)
		}
	}
	if c.MaxQueue == 0 {
		c.MaxQueue = 4 * c.MaxRequests
	}
	if c.PrefillChunk == 0 {
		c.PrefillChunk = DefaultPrefillChunk
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	return c
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
	// PromptTopLogprobs, with PromptLogprobs, also gives the n most likely ids with their
	// logprobs at each prompt position 1..n-1 (from the same logits), ≤ 20.
	PromptTopLogprobs int
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
	// PromptTopLogprobs, with PromptLogprobs when Request.PromptTopLogprobs > 0: for
	// i = 1..n-1 the Request.PromptTopLogprobs most likely ids after prompt[:i], most
	// likely first.
	PromptTopLogprobs [][]TokenLogprob
	Done              bool
	FinishReason      string
	Err               error
	Stats             Stats // with Done
}

// Errors returned by Submit.
var (
	ErrBusy   = errors.New("serve: engine busy: request queue is full")
	ErrClosed = errors.New("serve: engine closed")
)

// Engine generates for many requests at once with continuous batching (see the package
// doc): a scheduler goroutine admits queued requests into free KV-cache slots, runs one
// forward per step over every running request's new tokens, samples, and streams each
// request's events. Its methods may be called from any goroutine.
type Engine struct {
	cfg   EngineConfig
	vocab int
	ranks []*rank
	bytes int64 // KV cache per rank

	mu     sync.Mutex
	queue  []*seq // waiting for a slot, in arrival order
	closed bool
	err    error         // why the engine stopped, if it failed
	wake   chan struct{} // capacity 1: the scheduler has work
	done   chan struct{} // closed when the scheduler has stopped
	cancel context.CancelFunc
	tops   promptTops // owned by the scheduler goroutine
}

// NewEngine starts an engine over the TP ranks' models (len(models) = TP size, goroutine
// ranks; models[i] on rank i of its TP group, see LocalTP). Each model must be a whole
// model (not a pipeline stage) built without sequence parallelism, on its own device when
// there are several. It allocates the KV cache of every rank (CacheBytes each) and returns
// an error for an invalid configuration or a cache over cfg.MemoryBudget. On the CPU
// each rank keeps its weights packed for the matrix multiplies (tensor.PackedWeights, as
// much memory again as the weights), packed by a first step on one token before
// NewEngine returns. Close stops it.
func NewEngine(models []*nn.GPT, cfg EngineConfig) (*Engine, error) {
	return newEngine(models, cfg, nil)
}

// newEngine is NewEngine, or NewLeaderEngine when leader (rank 0's TP group) is not nil.
func newEngine(models []*nn.GPT, cfg EngineConfig, leader parallel.Comm) (*Engine, error) {
	if len(models) == 0 {
		return nil, errors.New("serve: NewEngine: no models")
	}
	m := models[0]
	maxPos := 0
	if m.Position != nil {
		maxPos = m.Config.MaxPosition
	}
	cfg = cfg.withDefaults(maxPos)
	if err := checkEngine(models, cfg, maxPos); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, vocab: m.Config.Vocab, bytes: m.SlotCacheBytes(cfg.MaxRequests, cfg.MaxSeqLen),
		wake: make(chan struct{}, 1), done: make(chan struct{}), tops: promptTops{}}
	if cfg.MemoryBudget > 0 && e.bytes > cfg.MemoryBudget {
		return nil, fmt.Errorf("serve: NewEngine: KV cache of %d slots × %d positions takes %d bytes per rank, over MemoryBudget %d",
			cfg.MaxRequests, cfg.MaxSeqLen, e.bytes, cfg.MemoryBudget)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	for _, m := range models {
		e.ranks = append(e.ranks, startRank(ctx, m, cfg, leader))
	}
	for _, r := range e.ranks { // the models are the engine's from here on
		<-r.ready
	}
	go e.loop()
	return e, nil
}

// checkEngine returns an error if models and cfg (with defaults) cannot make an engine.
func checkEngine(models []*nn.GPT, cfg EngineConfig, maxPos int) error {
	var errs []string
	if cfg.MaxRequests < 1 {
		errs = append(errs, fmt.Sprintf("MaxRequests = %d must be ≥ 1", cfg.MaxRequests))
	}
	if cfg.MaxSeqLen < 1 || (maxPos > 0 && cfg.MaxSeqLen > maxPos) {
		errs = append(errs, fmt.Sprintf("MaxSeqLen = %d must be in [1, %d]", cfg.MaxSeqLen, max(maxPos, cfg.MaxSeqLen, 1)))
	}
	if cfg.MaxQueue < 0 || cfg.PrefillChunk < 1 {
		errs = append(errs, fmt.Sprintf("MaxQueue = %d must be ≥ 0 and PrefillChunk = %d ≥ 1", cfg.MaxQueue, cfg.PrefillChunk))
	}
	if cfg.Heartbeat < 0 {
		errs = append(errs, fmt.Sprintf("Heartbeat = %v must be ≥ 0", cfg.Heartbeat))
	}
	devs := map[*tensor.Device]bool{}
	for i, m := range models {
		if !m.Stage.PreProcess || !m.Stage.PostProcess {
			errs = append(errs, fmt.Sprintf("models[%d] is a pipeline stage, not a whole model", i))
		}
		if m.Config.TransformerConfig != models[0].Config.TransformerConfig {
			errs = append(errs, fmt.Sprintf("models[%d] has another configuration than models[0]", i))
		}
		d := m.Word.Weight.Device()
		if devs[d] {
			errs = append(errs, fmt.Sprintf("models[%d] shares its device with another rank (give each goroutine rank its own)", i))
		}
		devs[d] = true
	}
	if len(errs) > 0 {
		return errors.New("serve: NewEngine: " + strings.Join(errs, "; "))
	}
	return nil
}

// Close refuses new requests, finishes running and queued ones, stops the ranks and
// frees the KV cache. It returns the error that stopped the engine, if one did.
func (e *Engine) Close() error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.poke()
	<-e.done
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// Vocab returns the true vocabulary size (ids ≥ it are invalid).
func (e *Engine) Vocab() int { return e.vocab }

// MaxSeqLen returns the positions per slot: prompt + MaxNewTokens must not exceed it.
func (e *Engine) MaxSeqLen() int { return e.cfg.MaxSeqLen }

// Config returns the engine's configuration with defaults filled in.
func (e *Engine) Config() EngineConfig { return e.cfg }

// CacheBytes returns the size of the KV cache on each rank.
func (e *Engine) CacheBytes() int64 { return e.bytes }

// Submit queues r; the returned channel yields its events and is closed after the Done
// event. Cancelling ctx (client gone) frees its slot at the next step. Errors: ErrBusy
// (queue full), ErrClosed, or a validation error naming the field (empty prompt, id out of
// range, prompt+MaxNewTokens > MaxSeqLen).
func (e *Engine) Submit(ctx context.Context, r Request) (<-chan Event, error) {
	if err := e.validate(r); err != nil {
		return nil, err
	}
	s := newSeq(ctx, r)
	if r.MaxNewTokens == 0 && !r.PromptLogprobs {
		s.finish("length", nil)
		return s.out, nil
	}
	e.mu.Lock()
	switch {
	case e.closed:
		e.mu.Unlock()
		return nil, ErrClosed
	case len(e.queue) >= e.cfg.MaxQueue:
		e.mu.Unlock()
		return nil, ErrBusy
	}
	e.queue = append(e.queue, s)
	e.mu.Unlock()
	e.poke()
	return s.out, nil
}

// poke wakes the scheduler.
func (e *Engine) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// validate returns an error naming the first field of r that the engine cannot serve.
func (e *Engine) validate(r Request) error {
	if len(r.Prompt) == 0 {
		return errors.New("serve: Request.Prompt is empty")
	}
	for i, id := range r.Prompt {
		if id < 0 || int(id) >= e.vocab {
			return fmt.Errorf("serve: Request.Prompt[%d] = %d is outside the vocabulary [0, %d)", i, id, e.vocab)
		}
	}
	if r.MaxNewTokens < 0 {
		return fmt.Errorf("serve: Request.MaxNewTokens = %d must be ≥ 0", r.MaxNewTokens)
	}
	if n := len(r.Prompt) + r.MaxNewTokens; n > e.cfg.MaxSeqLen {
		return fmt.Errorf("serve: Request: %d prompt tokens + MaxNewTokens %d = %d exceed MaxSeqLen %d",
			len(r.Prompt), r.MaxNewTokens, n, e.cfg.MaxSeqLen)
	}
	if r.TopLogprobs < 0 || r.TopLogprobs > MaxTopLogprobs {
		return fmt.Errorf("serve: Request.TopLogprobs = %d must be in [0, %d]", r.TopLogprobs, MaxTopLogprobs)
	}
	if r.PromptTopLogprobs < 0 || r.PromptTopLogprobs > MaxTopLogprobs || (r.PromptTopLogprobs > 0 && !r.PromptLogprobs) {
		return fmt.Errorf("serve: Request.PromptTopLogprobs = %d must be in [0, %d], and 0 without PromptLogprobs",
			r.PromptTopLogprobs, MaxTopLogprobs)
	}
	return r.Sampling.validate()
}

// validate returns an error naming the first invalid field of s.
func (s Sampling) validate() error {
	switch {
	case !(s.Temperature >= 0) || math.IsInf(s.Temperature, 1):
		return fmt.Errorf("serve: Sampling.Temperature = %v must be finite and ≥ 0", s.Temperature)
	case s.TopK < 0:
		return fmt.Errorf("serve: Sampling.TopK = %d must be ≥ 0", s.TopK)
	case !(s.TopP >= 0 && s.TopP <= 1):
		return fmt.Errorf("serve: Sampling.TopP = %v must be in [0, 1]", s.TopP)
	case !(s.TopPDecay >= 0 && s.TopPDecay <= 1):
		return fmt.Errorf("serve: Sampling.TopPDecay = %v must be in [0, 1]", s.TopPDecay)
	case !(s.TopPBound >= 0 && s.TopPBound <= 1):
		return fmt.Errorf("serve: Sampling.TopPBound = %v must be in [0, 1]", s.TopPBound)
	}
	return nil
}
