// Package serve runs trained megago GPT models for text generation: an Engine that
// batches many requests continuously over a slotted KV cache, and the HTTP server on top
// of it.
//
// # Engine
//
// An Engine (NewEngine) serves a TP group of models, one *nn.GPT per goroutine rank
// (LocalTP builds them), each on its own device. Submit validates a Request, queues it
// (ErrBusy beyond EngineConfig.MaxQueue waiting requests) and returns a channel of
// Events: prompt log-probabilities when asked, then each token as it is chosen, then one
// Done event with the finish reason ("stop", "length", "cancelled", "error") and Stats.
// The channel has room for every event of its request, so a slow reader never holds up
// the engine.
//
// One scheduler goroutine owns all request state. At every step it
//
//  1. admits queued requests, in arrival order, into free slots of the KV cache;
//  2. finishes requests whose context is done ("cancelled"), freeing their slots;
//  3. plans one forward over a flat set of new tokens: the last generated token of every
//     decoding request, then chunks of newly admitted prompts, oldest request first,
//     filling the step up to PrefillChunk tokens (with room for at least half as many
//     prompt tokens), each token with its (slot, position);
//  4. runs that plan on every TP rank (nn.GPT.DecodeStep): the linear layers, norms and
//     MLP run once over all N tokens [1, N, C] (an MoE layer routes them, its experts
//     split over expert groups among the TP ranks as the models were built: megago
//     serve's --expert-model-parallel-size); attention runs per request and key/value
//     group against its slot's cached positions, causally within the new tokens;
//  5. turns the logits it asked for into prompt log-probabilities and, for requests whose
//     tokens are all in the cache, the next token (sampling, Ban, StopIDs, Stop), and
//     frees the slots of finished requests.
//
// Requests therefore join and leave the running batch at every step; prefill and decode
// share steps.
//
// KV cache: nn.SlotCache, for every layer and slot keys and values [1, G/tp, MaxSeqLen,
// HS], allocated once by NewEngine (Engine.CacheBytes per rank; EngineConfig.MemoryBudget
// bounds it). A slot's positions [0, fed) are valid; nothing is copied when a request
// grows, and a freed slot is simply overwritten by the next.
//
// Batch independence: a request's logits, and so its tokens and log-probabilities, are
// bit for bit the same alone and in any batch. The CPU GEMM computes each row of C from
// its row of A alone, whatever the row count (tensor's TestSgemmRowsIndependentOfM, all
// kernels); norms, activations and the embedding are per token; attention sees only the
// request's slot; sampling draws from the request's own seed. The engine's tokens equal
// nn.Generate's for the same prompts (greedy, and sampled: a request draws Generate's
// numbers for its row 0), which runs the same ops over [B, T].
//
// Sampling: Sampling's temperature, top-k and top-p are nn.GenerateOptions' (applied in
// that order to the true vocabulary); TopPDecay and TopPBound are Megatron's (after each
// token top_p = max(top_p·decay, bound)). Logprobs are log-softmax of the raw logits
// (temperature 1, before Ban), as Megatron and OpenAI report them; the most likely
// alternatives (TopLogprobs, and PromptTopLogprobs at the prompt's positions, which
// evaluation harnesses compare with the prompt's own tokens) come from the same logits.
//
// Tensor parallelism: every rank runs the same plan. With goroutine ranks (NewEngine) the
// plan travels to the rank goroutines over channels; with ranks as processes (megago
// launch), rank 0 runs the engine (NewLeaderEngine) and broadcasts each plan over the TP
// group to the other ranks, which run Follow; while idle it broadcasts an empty plan every
// EngineConfig.Heartbeat, so that the followers' wait never reaches the transport's
// timeout. The logits, gathered over TP inside
// DecodeStep, are read on rank 0. A failed step (a collective error, a panic) fails every
// running and queued request and stops the engine; Close then returns the error.
//
// Load: RunLoad drives an Engine with closed-loop clients and reports generated tokens/s,
// time to first token and latency percentiles; `megago bench engine` prints them for 1, 8
// and 32 clients (bench/results/). RunHTTPLoad measures the same over HTTP, streaming
// completions from a running server (`megago bench serve`).
//
// # HTTP server
//
// A Server (NewServer) puts a tokenizer in front of a Generator (an *Engine, or a fake in
// tests) and serves, with net/http: Megatron's PUT /api (its text generation server's
// fields, defaults, checks and response {text, segments, tokens[, logprobs]}; unknown
// fields ignored, as Megatron does; every refusal a 400, where Megatron answers some with
// 200), the OpenAI-compatible POST /v1/completions (also /completions) and POST
// /v1/chat/completions with server-sent-event streaming, text-level stop strings, n, echo,
// logprobs and seed, GET /health, GET /v1/models, and a web page at / (serve/web, embedded).
// Chat conversations are rendered with the tokenizer's Jinja chat_template
// (github.com/ardanlabs/jinja; golden renderings from @huggingface/jinja in
// testdata/chat), else PlainChatTemplate. A full queue is a 429, a closing server a 503,
// an oversized body a 413; a client that disconnects cancels its request, which frees its
// slot; Drain (megago serve on SIGTERM) finishes running requests and refuses new ones.
// `megago serve` builds the models from a checkpoint (megago, Hugging Face or Megatron),
// the tokenizer from the examples' flags, and runs a Server; .ci/serve.sh drives it with
// the official openai npm client, curl and a headless chromium (playwright-core).
package serve
