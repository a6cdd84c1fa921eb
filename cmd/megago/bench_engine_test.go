package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchEngine: megago bench engine prints one report per client count, each with the
// requests it was asked for, then the throughput ratios.
func TestBenchEngine(t *testing.T) {
	stdout, stderr, err := run(t, "bench", "engine", "--layers", "1", "--dim", "16", "--heads", "2", "--vocab", "50",
		"--block", "16", "--clients", "1,3", "--requests-per-client", "2", "--prompt", "4", "--new-tokens", "3")
	if err != nil {
		t.Fatalf("megago bench engine: %v\n%s", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines, got:\n%s", stdout)
	}
	for i, clients := range []int{1, 3} {
		var rep struct {
			Clients, Requests int
			TokensPerS        float64 `json:"tokens_per_s"`
		}
		if err := json.Unmarshal([]byte(lines[i]), &rep); err != nil {
			t.Fatalf("line %d is not JSON: %v\n%s", i, err, lines[i])
		}
		if rep.Clients != clients || rep.Requests != 2*clients || !(rep.TokensPerS > 0) {
			t.Errorf("line %d: %+v, want %d clients, %d requests, tokens/s > 0", i, rep, clients, 2*clients)
		}
	}
	if !strings.Contains(lines[2], `"throughput_ratio_to_first"`) {
		t.Errorf("last line %q has no ratios", lines[2])
	}
	if _, _, err := run(t, "bench", "engine", "--clients", "0"); err == nil {
		t.Error("--clients 0 succeeded, want an error")
	}
}
