package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchServe runs megago bench serve against a megago serve in this process: one
// report per client count, each with every token it asked for, then the ratios.
func TestBenchServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	url, ended := serveInProcess(t, ctx, testServeArgs("1"))
	stdout, stderr, err := run(t, "bench", "serve", "--url", url, "--clients", "1,2", "--requests-per-client", "2",
		"--prompt", "4", "--new-tokens", "3", "--vocab", "50")
	cancel()
	if err != nil {
		t.Fatalf("megago bench serve: %v\n%s", err, stderr)
	}
	if err := <-ended; err != nil {
		t.Fatalf("megago serve: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines, got:\n%s", stdout)
	}
	for i, clients := range []int{1, 2} {
		var rep struct {
			Clients, Requests int
			Seconds           float64
			TokensPerS        float64 `json:"tokens_per_s"`
			TTFTP50           float64 `json:"ttft_p50_ms"`
		}
		if err := json.Unmarshal([]byte(lines[i]), &rep); err != nil {
			t.Fatalf("line %d is not JSON: %v\n%s", i, err, lines[i])
		}
		tokens := rep.TokensPerS * rep.Seconds
		if rep.Clients != clients || rep.Requests != 2*clients || tokens < float64(3*rep.Requests)-1e-6 || tokens > float64(3*rep.Requests)+1e-6 || !(rep.TTFTP50 > 0) {
			t.Errorf("line %d: %+v (%v tokens), want %d clients, %d requests of 3 tokens", i, rep, tokens, clients, 2*clients)
		}
	}
	if !strings.Contains(lines[2], `"throughput_ratio_to_first"`) {
		t.Errorf("last line %q has no ratios", lines[2])
	}
	for _, args := range [][]string{{"--url", "localhost:5000"}, {"--url", url, "--clients", "0"}} {
		if _, _, err := run(t, append([]string{"bench", "serve"}, args...)...); exitCode(err) != 2 {
			t.Errorf("megago bench serve %v: %v, want a usage error", args, err)
		}
	}
}
