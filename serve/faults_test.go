package serve

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"megago/data"
)

func TestOpenAIRefusals(t *testing.T) {
	_, url := nullServer(t, 16, 4)
	tests := []struct {
		name, path, body string
		code             int
		param, want      string // the error's param and a part of its message
	}{
		{"unknown field", "/v1/completions", `{"prompt": "1", "frobnicate": true}`, 400, "frobnicate", `unknown field "frobnicate"`},
		{"wrong type", "/v1/completions", `{"prompt": "1", "max_tokens": "3"}`, 400, "max_tokens", "max_tokens: got string, want an integer"},
		{"negative max_tokens", "/v1/completions", `{"prompt": "1", "max_tokens": -1}`, 400, "max_tokens", "max_tokens: -1 must be ≥ 0"},
		{"too long", "/v1/completions", `{"prompt": "1 2 3 4 5 6 7 8 9 10", "max_tokens": 7}`, 400, "prompt", "maximum context length is 16 tokens. However, you requested 17 tokens (10 in your prompt; 7 for the completion)"},
		{"prompt fills context", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "` + strings.Repeat("1 ", 16) + `"}]}`, 400, "messages", "maximum context length is 16 tokens"},
		{"unknown model", "/v1/completions", `{"model": "gpt-9", "prompt": "1"}`, 404, "model", "The model `gpt-9` does not exist"},
		{"temperature", "/v1/completions", `{"prompt": "1", "temperature": 3}`, 400, "temperature", "temperature: 3 must be in [0, 2]"},
		{"n", "/v1/completions", `{"prompt": "1", "n": 0}`, 400, "n", "n: 0 must be in [1, 16]"},
		{"logprobs", "/v1/completions", `{"prompt": "1", "logprobs": 21}`, 400, "logprobs", "logprobs: 21 must be in [0, 20]"},
		{"stop type", "/v1/completions", `{"prompt": "1", "stop": 5}`, 400, "stop", "stop: want a string or a list of strings"},
		{"no prompt", "/v1/completions", `{"max_tokens": 1}`, 400, "prompt", "prompt is required"},
		{"token out of vocabulary", "/v1/completions", `{"prompt": [1, 100]}`, 400, "prompt", "token id 100 outside the vocabulary [0, 100)"},
		{"max_tokens 0 without echo", "/v1/completions", `{"prompt": "1", "max_tokens": 0}`, 400, "max_tokens", "max_tokens: 0 generates nothing"},
		{"empty body", "/v1/completions", ``, 400, "", "request body is empty"},
		{"not JSON", "/v1/completions", `{"prompt": `, 400, "", "request body"},
		{"array body", "/v1/chat/completions", `[1]`, 400, "", "request body must be a JSON object"},
		{"no messages", "/v1/chat/completions", `{"messages": []}`, 400, "messages", "messages: want at least one message"},
		{"message type", "/v1/chat/completions", `{"messages": [{"role": "user", "content": 5}]}`, 400, "messages", "messages[0].content: want a string"},
		{"unknown message field", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "1", "mood": "x"}]}`, 400, "mood", `unknown field "mood"`},
		{"top_logprobs alone", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "1"}], "top_logprobs": 2}`, 400, "top_logprobs", "requires logprobs: true"},
		{"penalty", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "1"}], "presence_penalty": 0.5}`, 400, "presence_penalty", "not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, b := call(t, "POST", url+tt.path, tt.body)
			var e openAIError
			decode(t, b, &e)
			param := ""
			if e.Error.Param != nil {
				param = *e.Error.Param
			}
			if code != tt.code || param != tt.param || !strings.Contains(e.Error.Message, tt.want) || e.Error.Type == "" {
				t.Errorf("POST %s %s = %d %s, want %d param %q message with %q", tt.path, tt.body, code, b, tt.code, tt.param, tt.want)
			}
		})
	}
}

func TestBodyTooLarge(t *testing.T) {
	tok, _ := data.NewNullTokenizer(testVocab)
	_, url := startServer(t, newFake(testVocab, 64, 4), tok, ServerConfig{MaxBodyBytes: 100})
	big := `{"prompt": "` + strings.Repeat("1 ", 100) + `1"}`
	for _, path := range []string{"/v1/completions", "/api"} {
		method := "POST"
		if path == "/api" {
			method = "PUT"
		}
		if code, b := call(t, method, url+path, big); code != http.StatusRequestEntityTooLarge {
			t.Errorf("%s with %d bytes = %d %s, want 413", path, len(big), code, b)
		}
	}
}

// blockedServer starts a server whose fake engine generates a token only when the test
// sends on gate, and at most maxRunning requests at once.
func blockedServer(t *testing.T, maxRunning int) (*Server, *fakeEngine, string) {
	t.Helper()
	tok, _ := data.NewNullTokenizer(testVocab)
	f := newFake(testVocab, 64, maxRunning)
	f.gate = make(chan struct{})
	s, url := startServer(t, f, tok, ServerConfig{})
	return s, f, url
}

// startStream starts a streamed completion and returns its response once the headers
// have arrived; cancel ends the client's side.
func startStream(t *testing.T, url string) (*http.Response, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/completions", strings.NewReader(`{"prompt": "1", "max_tokens": 40, "stream": true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return resp, cancel
}

// waitFor fails the test if cond does not hold within a few seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestBusyAndDisconnect(t *testing.T) {
	_, f, url := blockedServer(t, 1)
	resp, cancel := startStream(t, url)
	defer resp.Body.Close()
	waitFor(t, "the request to run", func() bool { return f.nowRunning() == 1 })
	code, b := call(t, "POST", url+"/v1/completions", `{"prompt": "1"}`)
	if code != http.StatusTooManyRequests || !strings.Contains(string(b), "rate_limit_error") {
		t.Errorf("second request with a full engine = %d %s, want 429", code, b)
	}
	if code, _ := call(t, "PUT", url+"/api", `{"prompts": ["1"], "tokens_to_generate": 1}`); code != http.StatusTooManyRequests {
		t.Errorf("PUT /api with a full engine = %d, want 429", code)
	}
	f.gate <- struct{}{} // one token streamed, then the client goes away
	cancel()
	select {
	case <-f.idleCh():
	case <-time.After(5 * time.Second):
		t.Fatal("the disconnected client's request still holds its slot")
	}
}

func TestDrain(t *testing.T) {
	s, f, url := blockedServer(t, 4)
	resp, cancel := startStream(t, url)
	defer cancel()
	defer resp.Body.Close()
	waitFor(t, "the request to run", func() bool { return f.nowRunning() == 1 })
	drained := make(chan error)
	go func() { drained <- s.Drain(context.Background()) }()
	waitFor(t, "draining", func() bool { return s.draining.Load() })
	if code, b := call(t, "POST", url+"/v1/completions", `{"prompt": "1"}`); code != http.StatusServiceUnavailable {
		t.Errorf("request while draining = %d %s, want 503", code, b)
	}
	if code, _ := call(t, "GET", url+"/health", ""); code != http.StatusServiceUnavailable {
		t.Errorf("GET /health while draining = %d, want 503", code)
	}
	select {
	case <-drained:
		t.Fatal("Drain returned while a request was running")
	case <-time.After(20 * time.Millisecond):
	}
	close(f.gate) // let the running request finish
	evs, done := events(t, resp.Body)
	if !done || len(evs) == 0 {
		t.Errorf("the running request did not finish its stream: %d events, [DONE] %v", len(evs), done)
	}
	if err := <-drained; err != nil {
		t.Errorf("Drain: %v", err)
	}
}

func TestClosedEngine(t *testing.T) {
	f, url := nullServer(t, 64, 4)
	f.Close()
	code, b := call(t, "POST", url+"/v1/completions", `{"prompt": "1"}`)
	if code != http.StatusServiceUnavailable || !strings.Contains(string(b), ErrClosed.Error()) {
		t.Errorf("closed engine = %d %s, want 503", code, b)
	}
}
