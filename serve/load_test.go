package serve

import (
	"context"
	"math"
	"strings"
	"testing"

	"megago/data"
)

// TestRunHTTPLoad drives a server on a real engine over HTTP: every request streams
// exactly NewTokens tokens (the end-of-document token does not stop them), and a
// refused request is an error with its status.
func TestRunHTTPLoad(t *testing.T) {
	e := testEngine(t, testModels(t, testConfigs()["gpt2"], 1), EngineConfig{MaxRequests: 2, MaxSeqLen: 16})
	tok, err := data.NewNullTokenizer(testVocab)
	if err != nil {
		t.Fatal(err)
	}
	_, url := startServer(t, e, tok, ServerConfig{ModelName: "tiny"})
	o := LoadOptions{Clients: 3, Requests: 6, PromptLen: 5, NewTokens: 4, Vocab: testVocab, Seed: 1}
	rep, err := RunHTTPLoad(context.Background(), nil, url, "tiny", o)
	if err != nil {
		t.Fatal(err)
	}
	tokens := rep.TokensPerSecond * rep.Seconds
	if rep.Clients != 3 || rep.Requests != 6 || math.Abs(tokens-float64(o.Requests*o.NewTokens)) > 1e-6 {
		t.Errorf("report %+v: %v tokens, want %d", rep, tokens, o.Requests*o.NewTokens)
	}
	if !(rep.TTFTP50Ms > 0 && rep.TTFTP50Ms <= rep.TTFTP99Ms && rep.TTFTP99Ms <= rep.LatencyP99Ms && rep.LatencyP50Ms <= rep.LatencyP99Ms) {
		t.Errorf("percentiles out of order: %+v", rep)
	}
	if _, err := RunHTTPLoad(context.Background(), nil, url, "other", o); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a model the server does not serve: %v, want a 404", err)
	}
}
