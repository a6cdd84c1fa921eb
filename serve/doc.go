// Package serve runs trained megago GPT models for text generation: an Engine that
// batches many requests continuously over a slotted KV cache (this file's engine
// section), and the HTTP server on top of it.
//
// # Engine
//
// The Engine owns one KV cache of MaxRequests slots × MaxSeqLen positions per layer,
// allocated once. Each step runs one forward over a flat set of tokens from several
// sequences (one decode token per running sequence, plus prefill chunks of newly admitted
// prompts), each token with its (slot, position). Requests join and leave at every step.
package serve
