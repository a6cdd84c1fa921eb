package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"

	"megago/serve"
)

// benchServeUsage documents megago bench serve.
const benchServeUsage = `megago bench serve --url http://127.0.0.1:PORT [flags]

Loads a running megago serve (or any server of OpenAI's completions API with vLLM's
ignore_eos) over HTTP with closed-loop clients: for each client count in --clients,
that many clients each send --requests-per-client streamed completion requests one
after another, so at most that many are outstanding. Each request is a prompt of
--prompt random token ids below --vocab asking for exactly --new-tokens greedy tokens.
Prints one JSON line per client count (generated tokens/s, time to the first streamed
token and request latency p50/p99, all measured by the client) and a last line with
each throughput's ratio to the first's. Size the server's queue for the largest count
(megago serve answers 429 beyond --inference-max-requests + --inference-max-queue).

  megago serve --load DIR --tokenizer-type gpt2 --port 5000 --inference-max-requests 32 &
  megago bench serve --url http://127.0.0.1:5000 --clients 1,8,32 --prompt 128 --new-tokens 64`

// runBenchServe is megago bench serve.
func runBenchServe(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench serve", flag.ContinueOnError)
	base := fs.String("url", "", "the server, http://HOST:PORT")
	model := fs.String("model", "", "the model field of the requests (default: none, the server's model)")
	clientsFlag := fs.String("clients", "1,8,32", "comma-separated concurrent client counts")
	perClient := fs.Int("requests-per-client", 2, "requests each client sends")
	prompt := fs.Int("prompt", 128, "prompt tokens per request")
	newTokens := fs.Int("new-tokens", 64, "generated tokens per request")
	vocab := fs.Int("vocab", 50257, "prompt ids are drawn below this (at most the served model's vocabulary)")
	seed := fs.Uint64("seed", 1337, "seed of the prompts")
	if err := parseBenchFlags(fs, args, benchServeUsage, stdout); err != nil {
		return err
	}
	clients, err := parseCounts(*clientsFlag)
	if err != nil {
		return &usageError{err}
	}
	if u, err := url.Parse(*base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &usageError{fmt.Errorf("--url %q: want http://HOST:PORT", *base)}
	}
	if *perClient < 1 || *prompt < 1 || *newTokens < 1 || *vocab < 1 {
		return &usageError{errors.New("--requests-per-client, --prompt, --new-tokens and --vocab must be ≥ 1")}
	}
	return printLoads(stdout, clients, func(n int) (serve.LoadReport, error) {
		return serve.RunHTTPLoad(ctx, nil, *base, *model, serve.LoadOptions{Clients: n, Requests: n * *perClient,
			PromptLen: *prompt, NewTokens: *newTokens, Vocab: *vocab, Seed: *seed})
	})
}
