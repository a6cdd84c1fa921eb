package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"megago/data"
	"megago/parallel"
	"megago/serve"
)

func init() {
	register(command{
		name:    "serve",
		summary: "serve a trained GPT over HTTP: Megatron's /api, OpenAI's completions and chat, a web page",
		usage: `megago serve --load DIR [--from megago|hf|megatron] --tokenizer-type TYPE [flags]

Serve loads a GPT (a megago checkpoint; with --from hf a Hugging Face directory, with
--from megatron a Megatron-LM checkpoint, read as megago convert reads them) and its
tokenizer, then answers on http://HOST:PORT/:

  PUT  /api                  Megatron-LM's text generation server: prompts,
                             tokens_to_generate, temperature, top_k, top_p, logprobs, ...
                             answering {text, segments, tokens[, logprobs]}
  POST /v1/completions       OpenAI's completions (also /completions), streamed as
                             server-sent events with "stream": true
  POST /v1/chat/completions  OpenAI's chat completions, the conversation rendered with
                             the tokenizer's chat template (tokenizer_config.json's
                             chat_template; --chat-template FILE overrides it), else a
                             plain "role: content" one
  GET  /v1/models, /health   the model served; 200 while serving, 503 while draining
  GET  /                     a web page to try the model, streaming with tokens/s

Requests share the model through the engine's continuous batching: at most
--inference-max-requests run at once, each within --inference-max-seq-length positions
(prompt and generated tokens); more wait in a queue, and beyond it get 429. SIGTERM or
Ctrl-C stops accepting requests (503), lets the running ones finish and exits.

--tensor-model-parallel-size N runs N TP ranks as goroutines of this process, each
on a device of its own; under megago launch -n N (or torchrun, or srun: the
environment they set) they are the N processes instead, talking over TCP: rank 0
loads its shard, runs the engine and the HTTP server, the other ranks run the steps it
sends them, and stop when it does. Give launch a --grace as long as --drain-timeout:

  megago launch -n 2 --grace 1m -- megago serve --load DIR --tensor-model-parallel-size 2 ...

A mixture-of-experts model (Mixtral, Qwen2-MoE, Qwen3-MoE, or a megago checkpoint of
a model trained with --num-experts, its routers' expert biases included) runs its
experts over the same TP ranks: by default each expert is split over all of them
(expert-TP = TP, expert-parallel size 1, as Megatron); --expert-model-parallel-size EP
with --expert-tensor-parallel-size ETP gives each rank E/EP whole experts (ETP 1) or
their parts, where ETP × EP divides TP. The layouts differ only in the rounding of
reordered sums.`,
		run: runServe,
	})
}

// serveFlags are serve's settings.
type serveFlags struct {
	load, from     string
	iteration      int
	tok            tokenizerFlags
	chatTemplate   string
	modelName      string
	tp             int
	ep, etp        int // the experts' parallel sizes (MoE models)
	device         string
	host           string
	port           int
	maxRequests    int
	maxSeqLen      int
	maxQueue       int
	maxBody        int64
	drainTimeout   time.Duration
	seqLenExplicit bool
}

// register adds serve's flags to fs.
func (c *serveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.load, "load", "", "the model: a megago checkpoint directory (or, with --from, a Hugging Face or Megatron-LM one)")
	fs.StringVar(&c.from, "from", "megago", "format of --load: megago, hf or megatron")
	fs.IntVar(&c.iteration, "iteration", 0, "iteration of a megago or Megatron checkpoint (0: the latest)")
	c.tok.register(fs)
	fs.StringVar(&c.chatTemplate, "chat-template", "", "a Jinja chat template file (default: the HuggingFaceTokenizer's chat_template, else a plain one)")
	fs.StringVar(&c.modelName, "served-model-name", "", "the model id of the OpenAI routes (default: the base name of --load)")
	fs.IntVar(&c.tp, "tensor-model-parallel-size", 1, "tensor-parallel ranks: goroutines in this process, or the processes of megago launch -n (the same number)")
	fs.IntVar(&c.ep, "expert-model-parallel-size", 1, "MoE models: expert-parallel ranks among the TP ranks (each holds E/EP experts)")
	fs.IntVar(&c.etp, "expert-tensor-parallel-size", 0, "MoE models: ranks splitting each expert's hidden size (0: --tensor-model-parallel-size); expert-TP × EP must divide TP")
	fs.StringVar(&c.device, "device", "cpu", "backend of every rank: cpu or cuda")
	fs.StringVar(&c.host, "host", "127.0.0.1", "address to listen on (0.0.0.0: every interface)")
	fs.IntVar(&c.port, "port", 5000, "port to listen on")
	fs.IntVar(&c.maxRequests, "inference-max-requests", 8, "requests running at once (KV cache slots)")
	fs.IntVar(&c.maxSeqLen, "inference-max-seq-length", 2560, "positions per request, prompt and generated tokens (at most the model's learned positions)")
	fs.IntVar(&c.maxQueue, "inference-max-queue", 0, "requests waiting for a slot before 429 (0: 4 × --inference-max-requests)")
	fs.Int64Var(&c.maxBody, "max-request-bytes", 4<<20, "largest request body accepted (413 above it)")
	fs.DurationVar(&c.drainTimeout, "drain-timeout", time.Minute, "on SIGTERM, how long running requests may take to finish")
}

// check returns every setting that cannot work, before anything is loaded.
func (c *serveFlags) check() error {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if c.load == "" {
		bad("--load is required")
	}
	if c.from != "megago" && c.from != "hf" && c.from != "megatron" {
		bad("--from %q: want megago, hf or megatron", c.from)
	}
	if c.iteration < 0 || c.iteration > 0 && c.from == "hf" {
		bad("--iteration %d: want ≥ 0, for a megago or Megatron checkpoint", c.iteration)
	}
	if c.tok.cfg.Type == "" {
		bad("--tokenizer-type is required")
	}
	for _, v := range []struct {
		name string
		val  int
		min  int
	}{{"tensor-model-parallel-size", c.tp, 1}, {"inference-max-requests", c.maxRequests, 1},
		{"inference-max-seq-length", c.maxSeqLen, 2}, {"inference-max-queue", c.maxQueue, 0}} {
		if v.val < v.min {
			bad("--%s %d: want ≥ %d", v.name, v.val, v.min)
		}
	}
	if c.ep < 1 || c.etp < 0 {
		bad("--expert-model-parallel-size %d, --expert-tensor-parallel-size %d: want ≥ 1 and ≥ 0", c.ep, c.etp)
	} else if _, err := c.sizes().Resolve(c.tp); c.tp >= 1 && err != nil {
		bad("--expert-tensor-parallel-size %d × --expert-model-parallel-size %d must divide --tensor-model-parallel-size %d",
			cmp.Or(c.etp, c.tp), c.ep, c.tp)
	}
	if c.port < 0 || c.port > 65535 {
		bad("--port %d: want 0 (any free port) to 65535", c.port)
	}
	if c.maxBody < 1 {
		bad("--max-request-bytes %d: want ≥ 1", c.maxBody)
	}
	if c.drainTimeout < 0 {
		bad("--drain-timeout %v: want ≥ 0", c.drainTimeout)
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var c serveFlags
	c.register(fs)
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	fs.Visit(func(f *flag.Flag) { c.seqLenExplicit = c.seqLenExplicit || f.Name == "inference-max-seq-length" })
	if err := c.check(); err != nil {
		return &usageError{err}
	}
	job, err := serveJobFromEnv(os.Getenv, c.tp)
	if err != nil {
		return err
	}
	if job != nil && job.Rank != 0 {
		return followServe(ctx, &c, *job)
	}
	tok, err := data.NewTokenizer(c.tok.cfg)
	if err != nil {
		return err
	}
	tmpl, err := c.loadChatTemplate()
	if err != nil {
		return err
	}
	name := c.modelName
	if name == "" {
		name = filepath.Base(filepath.Clean(c.load))
	}
	gen, what, stop, err := startServeEngine(ctx, &c, job, name)
	if err != nil {
		return err
	}
	defer stop()
	srv, err := serve.NewServer(gen, tok, serve.ServerConfig{ModelName: name, MaxBodyBytes: c.maxBody, ChatTemplate: tmpl})
	if err != nil {
		return err
	}
	return c.listen(ctx, srv, stdout, what)
}

// sizes returns the parallel sizes of the served model's ranks: one TP group, whose
// ranks are also the experts' expert-TP × EP groups.
func (c *serveFlags) sizes() parallel.Sizes {
	return parallel.Sizes{TP: c.tp, EP: c.ep, ETP: c.etp}
}

// engineConfig returns the engine's settings from the flags.
func (c *serveFlags) engineConfig() serve.EngineConfig {
	return serve.EngineConfig{MaxRequests: c.maxRequests, MaxSeqLen: c.maxSeqLen, MaxQueue: c.maxQueue}
}

// loadChatTemplate returns --chat-template's template, else the HuggingFaceTokenizer's,
// else nil (the server's plain one).
func (c *serveFlags) loadChatTemplate() (*serve.ChatTemplate, error) {
	if c.chatTemplate != "" {
		src, err := os.ReadFile(c.chatTemplate)
		if err != nil {
			return nil, err
		}
		return serve.NewChatTemplate(string(src), "", "", c.chatTemplate)
	}
	if c.tok.cfg.Type == "HuggingFaceTokenizer" && c.tok.cfg.TokenizerModel != "" {
		return serve.LoadChatTemplate(c.tok.cfg.TokenizerModel)
	}
	return nil, nil
}

// listen serves srv on --host:--port until ctx is cancelled (SIGTERM, Ctrl-C), then
// refuses new requests, waits up to --drain-timeout for the running ones and returns.
func (c *serveFlags) listen(ctx context.Context, srv *serve.Server, stdout io.Writer, what string) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(c.host, strconv.Itoa(c.port)))
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 30 * time.Second}
	fmt.Fprintf(stdout, "serving %s on http://%s/\n", what, ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	fmt.Fprintln(stdout, "stopping: finishing the running requests")
	dctx, cancel := context.WithTimeout(context.Background(), c.drainTimeout)
	defer cancel()
	derr := srv.Drain(dctx)
	if err := hs.Shutdown(dctx); err != nil || derr != nil {
		hs.Close()
		return fmt.Errorf("requests still running after --drain-timeout %v", c.drainTimeout)
	}
	fmt.Fprintln(stdout, "stopped")
	return nil
}
