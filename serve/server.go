package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"megago/data"
)

// Generator is what the HTTP server needs from an engine: *Engine in production, a
// deterministic fake in tests. Submit's contract is Engine.Submit's.
type Generator interface {
	Submit(ctx context.Context, r Request) (<-chan Event, error)
	Vocab() int
	MaxSeqLen() int
	Close() error
}

// ServerConfig configures NewServer. A zero field takes its default.
type ServerConfig struct {
	// ModelName is the id /v1/models lists and OpenAI requests must name; default "megago".
	ModelName string
	// MaxBodyBytes is the largest request body accepted (413 above it); default 4 MiB.
	MaxBodyBytes int64
	// ChatTemplate renders chat conversations; nil uses PlainChatTemplate.
	ChatTemplate *ChatTemplate
	// DefaultMaxTokens is the OpenAI completions default of max_tokens; default 16, as
	// OpenAI's. Chat completions default to the rest of the context.
	DefaultMaxTokens int
}

// defaults fills the zero fields of c.
func (c ServerConfig) defaults() ServerConfig {
	if c.ModelName == "" {
		c.ModelName = "megago"
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 4 << 20
	}
	if c.DefaultMaxTokens <= 0 {
		c.DefaultMaxTokens = 16
	}
	if c.ChatTemplate == nil {
		c.ChatTemplate = PlainChatTemplate()
	}
	return c
}

// Server is megago's text generation server: Megatron's PUT /api, the OpenAI-compatible
// POST /v1/completions (also /completions) and POST /v1/chat/completions with streaming,
// GET /health, GET /v1/models and the web page at /. It turns text into token ids with its
// tokenizer, submits them to its Generator and turns the events back into text.
//
// Refusals: a malformed request is a 400 saying what was wrong (OpenAI's error object on
// the OpenAI routes, Megatron's message as a JSON string on /api), a body over
// MaxBodyBytes a 413, a full queue (ErrBusy) a 429, a closed or draining server (ErrClosed,
// Drain) a 503. A client that goes away cancels its requests, which frees their slots.
type Server struct {
	gen     Generator
	tok     data.Tokenizer
	cfg     ServerConfig
	mux     *http.ServeMux
	created int64 // Unix time the server started, for /v1/models

	draining atomic.Bool
	running  sync.WaitGroup // requests inside handlers, for Drain
	ids      atomic.Uint64  // completion ids
}

// NewServer returns a server generating with gen and tok. It returns an error if the
// tokenizer's vocabulary is larger than the model's.
func NewServer(gen Generator, tok data.Tokenizer, cfg ServerConfig) (*Server, error) {
	if tok.VocabSize() > gen.Vocab() {
		return nil, fmt.Errorf("serve: tokenizer has %d ids, the model only %d", tok.VocabSize(), gen.Vocab())
	}
	s := &Server{gen: gen, tok: tok, cfg: cfg.defaults(), mux: http.NewServeMux(), created: time.Now().Unix()}
	s.mux.HandleFunc("PUT /api", s.guard(s.handleMegatron))
	s.mux.HandleFunc("POST /v1/completions", s.guard(s.handleCompletions))
	s.mux.HandleFunc("POST /completions", s.guard(s.handleCompletions))
	s.mux.HandleFunc("POST /v1/chat/completions", s.guard(s.handleChat))
	s.mux.HandleFunc("POST /chat/completions", s.guard(s.handleChat))
	s.mux.HandleFunc("GET /health", s.handleHealth)
	s.mux.HandleFunc("GET /v1/models", s.handleModels)
	s.mux.HandleFunc("GET /models", s.handleModels)
	s.mux.Handle("GET /", webHandler())
	return s, nil
}

// ServeHTTP serves the routes listed on Server.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Drain makes the server refuse new generation requests with 503 and waits until the
// running ones have finished or ctx is done. http.Server.Shutdown does the same for the
// connections; Drain also covers requests on connections Shutdown is still waiting for.
func (s *Server) Drain(ctx context.Context) error {
	s.draining.Store(true)
	done := make(chan struct{})
	go func() { s.running.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// guard wraps a generation handler: it refuses requests while draining, limits the body
// size and counts the request as running.
func (s *Server) guard(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() {
			s.refuse(w, r, http.StatusServiceUnavailable, "server is shutting down", "")
			return
		}
		s.running.Add(1)
		defer s.running.Done()
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
		h(w, r)
	}
}

// handleHealth answers 200 {"status":"ok"}, or 503 while draining.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// handleModels lists the one model served, as OpenAI's GET /v1/models does.
func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
		MaxLen  int    `json:"max_model_len"`
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list",
		"data": []model{{ID: s.cfg.ModelName, Object: "model", Created: s.created, OwnedBy: "megago", MaxLen: s.gen.MaxSeqLen()}}})
}

// submitStatus maps an error of Submit to an HTTP status: 429 for ErrBusy, 503 for
// ErrClosed, 400 for anything else (the engine's validation errors).
func submitStatus(err error) int {
	switch {
	case errors.Is(err, ErrBusy):
		return http.StatusTooManyRequests
	case errors.Is(err, ErrClosed):
		return http.StatusServiceUnavailable
	}
	return http.StatusBadRequest
}
