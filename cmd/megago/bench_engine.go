package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"megago/nn"
	"megago/parallel"
	"megago/serve"
	"megago/tensor"
)

// benchEngineUsage documents megago bench engine.
const benchEngineUsage = `megago bench engine [flags]

Drives the serving engine (package serve) directly with closed-loop clients: for each
client count in --clients, that many clients each submit --requests-per-client requests
(a random --prompt-token prompt, exactly --new-tokens greedy tokens) one after another.
Prints one JSON line per client count (generated tokens/s, time to first token and
request latency p50/p99) and a last line with each throughput's ratio to the first's.
The model is GPT-2-shaped with random weights (the numbers do not depend on them).

  megago bench engine --clients 1,8,32 --prompt 128 --new-tokens 64   # GPT-2 124M shape`

// benchEngineConfig holds the flags of megago bench engine.
type benchEngineConfig struct {
	Layers, Dim, Heads, Vocab, Block int
	Clients                          string
	PerClient, Prompt, NewTokens     int
	Slots, PrefillChunk, Threads, TP int
	Seed                             uint64
	CPUProfile                       string
}

func runBenchEngine(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench engine", flag.ContinueOnError)
	var c benchEngineConfig
	fs.IntVar(&c.Layers, "layers", 12, "transformer layers L")
	fs.IntVar(&c.Dim, "dim", 768, "hidden size C")
	fs.IntVar(&c.Heads, "heads", 12, "attention heads")
	fs.IntVar(&c.Vocab, "vocab", 50257, "vocabulary size V")
	fs.IntVar(&c.Block, "block", 1024, "position table size")
	fs.StringVar(&c.Clients, "clients", "1,8,32", "comma-separated concurrent client counts")
	fs.IntVar(&c.PerClient, "requests-per-client", 2, "requests each client sends")
	fs.IntVar(&c.Prompt, "prompt", 128, "prompt tokens per request")
	fs.IntVar(&c.NewTokens, "new-tokens", 64, "generated tokens per request")
	fs.IntVar(&c.Slots, "inference-max-requests", 32, "KV-cache slots (requests running at once)")
	fs.IntVar(&c.PrefillChunk, "prefill-chunk", 0, "tokens of a step that prefills, decoding ones included (0: the engine's default)")
	fs.IntVar(&c.Threads, "threads", 0, "threads (GOMAXPROCS); 0 keeps Go's default")
	fs.IntVar(&c.TP, "tensor-model-parallel-size", 1, "goroutine TP ranks")
	fs.Uint64Var(&c.Seed, "seed", 1337, "seed of the weights and the prompts")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a pprof CPU profile of the load runs to this file")
	if err := parseBenchFlags(fs, args, benchEngineUsage, stdout); err != nil {
		return err
	}
	clients, err := parseCounts(c.Clients)
	if err != nil {
		return &usageError{err}
	}
	if c.Threads > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(c.Threads))
	}
	cfg := nn.GPTConfig{TransformerConfig: nn.TransformerConfig{NumLayers: c.Layers, Hidden: c.Dim, Heads: c.Heads,
		Vocab: c.Vocab, MaxPosition: c.Block, Bias: true}}
	t0 := time.Now()
	models, release, err := serve.LocalTP(c.TP, func(tp parallel.Comm) (*nn.GPT, error) {
		b := &nn.Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(c.Seed), TP: tp}
		return nn.NewGPT(b, cfg, nn.Stage{})
	})
	if err != nil {
		return err
	}
	defer release()
	e, err := serve.NewEngine(models, serve.EngineConfig{MaxRequests: c.Slots, MaxSeqLen: c.Prompt + c.NewTokens,
		MaxQueue: slices.Max(clients), PrefillChunk: c.PrefillChunk})
	if err != nil {
		return err
	}
	defer e.Close()
	fmt.Fprintf(stderr, "model built in %.1f s; KV cache %.0f MiB per rank; GOMAXPROCS %d\n",
		time.Since(t0).Seconds(), mb(e.CacheBytes()), runtime.GOMAXPROCS(0))
	stop, err := startRecording(c.CPUProfile, "")
	if err != nil {
		return err
	}
	defer stop()
	return printLoads(stdout, clients, func(n int) (serve.LoadReport, error) {
		return serve.RunLoad(ctx, e, serve.LoadOptions{Clients: n, Requests: n * c.PerClient,
			PromptLen: c.Prompt, NewTokens: c.NewTokens, Vocab: c.Vocab, Seed: c.Seed})
	})
}

// printLoads runs load for each client count in clients and prints its report as a
// JSON line, then a last line with each throughput's ratio to the first's.
func printLoads(stdout io.Writer, clients []int, load func(n int) (serve.LoadReport, error)) error {
	var ratios []string
	base := 0.0
	for _, n := range clients {
		rep, err := load(n)
		if err != nil {
			return err
		}
		if base == 0 {
			base = rep.TokensPerSecond
		}
		ratios = append(ratios, fmt.Sprintf("%q: %.2f", strconv.Itoa(n), rep.TokensPerSecond/base))
		line, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", line)
	}
	_, err := fmt.Fprintf(stdout, "{\"throughput_ratio_to_first\": {%s}}\n", strings.Join(ratios, ", "))
	return err
}

// parseBenchFlags parses a bench workload's flags from args into fs: -h prints usage
// and the flags; a bad flag or an argument is a usage error.
func parseBenchFlags(fs *flag.FlagSet, args []string, usage string, stdout io.Writer) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stdout, "usage: %s\n\nFlags:\n", usage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return err
	} else if err != nil {
		return &usageError{err}
	}
	return noArgs(fs)
}

// parseCounts parses a comma-separated list of positive counts.
func parseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--clients: %q is not a positive count", f)
		}
		out = append(out, n)
	}
	return out, nil
}
