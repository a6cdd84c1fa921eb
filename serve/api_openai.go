package serve

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
)

// openAIParams are the fields completions and chat completions share. Pointers tell an
// absent field from a zero one.
type openAIParams struct {
	Model            string          `json:"model"`
	MaxTokens        *int            `json:"max_tokens"`
	Temperature      *float64        `json:"temperature"`
	TopP             *float64        `json:"top_p"`
	TopK             *int            `json:"top_k"` // vLLM's extension; -1 or 0: all
	N                *int            `json:"n"`
	Stream           bool            `json:"stream"`
	StreamOptions    *streamOptions  `json:"stream_options"`
	Stop             json.RawMessage `json:"stop"`
	Seed             *int64          `json:"seed"`
	User             string          `json:"user"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	LogitBias        map[string]any  `json:"logit_bias"`
	IgnoreEOS        bool            `json:"ignore_eos"` // vLLM's extension: the end-of-document token does not stop generation
}

// streamOptions is OpenAI's stream_options.
type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Limits of the OpenAI routes.
const (
	maxChoices     = 16 // n
	maxStops       = 16 // stop strings (OpenAI allows 4)
	maxTopLogprobs = 20 // logprobs (completions), top_logprobs (chat)
)

// openAIRun is a checked OpenAI request: what every choice generates with.
type openAIRun struct {
	n       int
	stops   []string
	stream  bool
	usage   bool // stream_options.include_usage
	maxNew  int  // -1: the rest of the context
	noStop  bool // ignore_eos: the tokenizer's EOD and EOS do not end generation
	sample  Sampling
	created int64
}

// check validates the shared fields and returns the run they describe; defMax is the
// max_tokens default (-1: the rest of the context).
func (s *Server) checkParams(p *openAIParams, defMax int) (*openAIRun, error) {
	if p.Model != "" && p.Model != s.cfg.ModelName {
		return nil, &requestError{status: http.StatusNotFound, param: "model",
			msg: fmt.Sprintf("The model `%s` does not exist: this server serves `%s`", p.Model, s.cfg.ModelName)}
	}
	run := &openAIRun{n: 1, maxNew: defMax, stream: p.Stream, sample: Sampling{Temperature: 1}, noStop: p.IgnoreEOS}
	if p.StreamOptions != nil {
		if !p.Stream {
			return nil, badRequest("stream_options", "stream_options: only allowed with stream: true")
		}
		run.usage = p.StreamOptions.IncludeUsage
	}
	if p.MaxTokens != nil {
		if *p.MaxTokens < 0 {
			return nil, badRequest("max_tokens", "max_tokens: %d must be ≥ 0", *p.MaxTokens)
		}
		run.maxNew = *p.MaxTokens
	}
	if t := p.Temperature; t != nil {
		if !(*t >= 0 && *t <= 2) {
			return nil, badRequest("temperature", "temperature: %v must be in [0, 2]", *t)
		}
		run.sample.Temperature = *t
	}
	if t := p.TopP; t != nil {
		if !(*t > 0 && *t <= 1) {
			return nil, badRequest("top_p", "top_p: %v must be in (0, 1]", *t)
		}
		run.sample.TopP = *t
	}
	if k := p.TopK; k != nil {
		if *k < -1 {
			return nil, badRequest("top_k", "top_k: %d must be ≥ 0 (or -1: all)", *k)
		}
		run.sample.TopK = max(*k, 0)
	}
	if n := p.N; n != nil {
		if *n < 1 || *n > maxChoices {
			return nil, badRequest("n", "n: %d must be in [1, %d]", *n, maxChoices)
		}
		run.n = *n
	}
	for name, v := range map[string]*float64{"frequency_penalty": p.FrequencyPenalty, "presence_penalty": p.PresencePenalty} {
		if v != nil && *v != 0 {
			return nil, badRequest(name, "%s: %v is not supported (only 0)", name, *v)
		}
	}
	if len(p.LogitBias) > 0 {
		return nil, badRequest("logit_bias", "logit_bias is not supported")
	}
	var err error
	if run.stops, err = parseStop(p.Stop); err != nil {
		return nil, err
	}
	if p.Seed != nil {
		run.sample.Seed = uint64(*p.Seed)
	} else {
		run.sample.Seed = rand.Uint64()
	}
	return run, nil
}

// parseStop reads OpenAI's stop: null, a string or a list of strings.
func parseStop(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || isNull(raw) {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest("stop", "stop: want a string or a list of strings")
	}
	if len(list) > maxStops {
		return nil, badRequest("stop", "stop: %d strings, at most %d", len(list), maxStops)
	}
	var out []string
	for _, s := range list {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// requests returns the engine requests of prompts under run, n per prompt in order
// (choice i·n + j is prompt i's j-th), or a 400 if a prompt does not fit the context.
// param names the prompt field in errors; stopIDs end generation unless run ignores EOS.
func (s *Server) requests(run *openAIRun, prompts [][]int32, param string, stopIDs []int32) ([]Request, error) {
	maxLen := s.gen.MaxSeqLen()
	if run.noStop {
		stopIDs = nil
	}
	var reqs []Request
	for i, p := range prompts {
		if len(p) == 0 {
			return nil, badRequest(param, "%s: prompt %d is empty (no tokens)", param, i)
		}
		for _, id := range p {
			if id < 0 || int(id) >= s.gen.Vocab() {
				return nil, badRequest(param, "%s: token id %d outside the vocabulary [0, %d)", param, id, s.gen.Vocab())
			}
		}
		n := run.maxNew
		if n < 0 {
			n = max(maxLen-len(p), 1) // the rest of the context, at least one token
		}
		if len(p)+n > maxLen {
			return nil, badRequest(param, "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in your prompt; %d for the completion). Please reduce your prompt; or completion length.",
				maxLen, len(p)+n, len(p), n)
		}
		for j := range run.n {
			smp := run.sample
			smp.Seed += uint64(i*run.n + j)
			reqs = append(reqs, Request{Prompt: p, MaxNewTokens: n, Sampling: smp, StopIDs: stopIDs})
		}
	}
	return reqs, nil
}

// stopIDs are the ids that end an OpenAI generation: the tokenizer's EOD and EOS.
func (s *Server) stopIDs(extra ...int32) []int32 {
	sp := s.tok.Special()
	var ids []int32
	for _, id := range append([]int32{sp.EOD, sp.EOS}, extra...) {
		if id >= 0 && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// response is an OpenAI response or stream chunk with choices of type C.
type response[C any] struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []C    `json:"choices"`
	Usage   *usage `json:"usage,omitempty"`
}

// decodeBody reads the request body into v with decodeStrict.
func decodeBody(r *http.Request, v any) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	return decodeStrict(body, v)
}

// usage is OpenAI's token count of a response.
type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// countUsage counts the prompt tokens once per prompt and every choice's tokens.
func countUsage(prompts [][]int32, out []outcome) usage {
	var u usage
	for _, p := range prompts {
		u.PromptTokens += len(p)
	}
	for _, o := range out {
		u.CompletionTokens += len(o.ids)
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// nextID returns a new response id with the given prefix ("cmpl", "chatcmpl").
func (s *Server) nextID(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, s.created, s.ids.Add(1))
}
