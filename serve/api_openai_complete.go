package serve

import (
	"encoding/json"
	"net/http"
)

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	openAIParams
	Prompt   json.RawMessage `json:"prompt"`
	Logprobs *int            `json:"logprobs"`
	Echo     bool            `json:"echo"`
	BestOf   *int            `json:"best_of"`
	Suffix   *string         `json:"suffix"`
}

// completionChoice is one choice of a completions response or chunk.
type completionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

// completionLogprobs are OpenAI's legacy log-probabilities: per token its text, its
// log-probability, the most likely alternatives (logprobs of them) and where its text
// starts. The prompt's first token (under echo) has null log-probabilities and
// alternatives; the other prompt tokens have both, as evaluation harnesses read them
// (lm-evaluation-harness: the sum of token_logprobs over the continuation, and whether
// each equals the largest of its top_logprobs).
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float32           `json:"token_logprobs"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// completion is a completions response or stream chunk.
type completion = response[completionChoice]

// handleCompletions serves OpenAI's POST /v1/completions: prompt as a string, a list of
// strings, a list of token ids or a list of lists of ids; n choices per prompt; echo;
// logprobs (the number of alternatives, 0 to 20); echo with logprobs and max_tokens 0
// gives the prompt's log-probabilities only, as evaluation harnesses use.
func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	err := decodeBody(r, &req)
	var run *openAIRun
	if err == nil {
		run, err = s.checkParams(&req.openAIParams, s.cfg.DefaultMaxTokens)
	}
	var prompts [][]int32
	if err == nil {
		prompts, err = s.checkCompletion(&req, run)
	}
	var reqs []Request
	if err == nil {
		reqs, err = s.requests(run, prompts, "prompt", s.stopIDs())
	}
	if err != nil {
		s.refuseErr(w, r, err)
		return
	}
	for i := range reqs {
		if req.Logprobs != nil {
			reqs[i].Logprobs, reqs[i].TopLogprobs, reqs[i].PromptLogprobs = true, *req.Logprobs, req.Echo
			if req.Echo {
				reqs[i].PromptTopLogprobs = *req.Logprobs
			}
		}
	}
	jobs, err := s.submitAll(r.Context(), reqs)
	if err != nil {
		s.refuseErr(w, r, err)
		return
	}
	c := &completer{s: s, id: s.nextID("cmpl"), req: &req, prompts: prompts, n: run.n, offset: make([]int, len(jobs))}
	if run.stream {
		s.stream(w, jobs, prompts, run, s.stopIDs(), c)
		return
	}
	out := s.collectAll(jobs, run.stops, s.stopIDs())
	if err := firstErr(out); err != nil {
		s.refuse(w, r, http.StatusInternalServerError, err.Error(), "")
		return
	}
	resp := c.chunk()
	for i, o := range out {
		ch := completionChoice{Index: i, FinishReason: &o.finish}
		if req.Echo {
			ch.Text = s.tok.Decode(prompts[i/run.n])
		}
		if req.Logprobs != nil {
			ch.Logprobs = &completionLogprobs{}
			if req.Echo {
				c.addPrompt(ch.Logprobs, i, o.prompt, o.promptTops)
			}
			c.addTokens(ch.Logprobs, i, tokensOf(o))
		}
		ch.Text += o.text
		resp.Choices = append(resp.Choices, ch)
	}
	u := countUsage(prompts, out)
	resp.Usage = &u
	writeJSON(w, http.StatusOK, resp)
}

// checkCompletion checks the completions-only fields and returns the prompts' ids.
func (s *Server) checkCompletion(req *completionRequest, run *openAIRun) ([][]int32, error) {
	if req.Logprobs != nil && (*req.Logprobs < 0 || *req.Logprobs > maxTopLogprobs) {
		return nil, badRequest("logprobs", "logprobs: %d must be in [0, %d]", *req.Logprobs, maxTopLogprobs)
	}
	if req.BestOf != nil && *req.BestOf != 1 {
		return nil, badRequest("best_of", "best_of: only 1 is supported")
	}
	if req.Suffix != nil && *req.Suffix != "" {
		return nil, badRequest("suffix", "suffix is not supported")
	}
	if run.maxNew == 0 && !req.Echo {
		return nil, badRequest("max_tokens", "max_tokens: 0 generates nothing; with echo and logprobs it returns the prompt's log-probabilities")
	}
	return s.parsePrompt(req.Prompt)
}

// parsePrompt reads OpenAI's prompt: a string, a list of strings, a list of token ids or a
// list of lists of token ids.
func (s *Server) parsePrompt(raw json.RawMessage) ([][]int32, error) {
	if len(raw) == 0 || isNull(raw) {
		return nil, badRequest("prompt", "prompt is required")
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return [][]int32{s.tok.Encode(one)}, nil
	}
	var texts []string
	if json.Unmarshal(raw, &texts) == nil && len(texts) > 0 {
		out := make([][]int32, len(texts))
		for i, t := range texts {
			out[i] = s.tok.Encode(t)
		}
		return out, nil
	}
	var ids []int32
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		return [][]int32{ids}, nil
	}
	var lists [][]int32
	if json.Unmarshal(raw, &lists) == nil && len(lists) > 0 {
		return lists, nil
	}
	return nil, badRequest("prompt", "prompt: want a non-empty string, list of strings, list of token ids or list of lists of token ids")
}

// tokensOf returns o's generated tokens.
func tokensOf(o outcome) []genToken {
	t := make([]genToken, len(o.ids))
	for k, id := range o.ids {
		t[k] = genToken{id, o.logprobs[k], o.tops[k]}
	}
	return t
}

// completer makes the chunks of a completions response.
type completer struct {
	s       *Server
	id      string
	req     *completionRequest
	prompts [][]int32
	n       int
	offset  []int // per choice: the text length so far, for text_offset
}

// chunk returns an empty response with the id, time and model.
func (c *completer) chunk() *completion {
	return &completion{ID: c.id, Object: "text_completion", Created: c.s.created, Model: c.s.cfg.ModelName, Choices: []completionChoice{}}
}

// addPrompt appends the prompt tokens of choice i with their log-probabilities lp and
// alternatives tops (of tokens 1..n-1) to l.
func (c *completer) addPrompt(l *completionLogprobs, i int, lp []float32, tops [][]TokenLogprob) {
	p := c.prompts[i/c.n]
	for k, seg := range c.s.segments(p) {
		var v *float32
		var top map[string]float32
		if k > 0 && k-1 < len(lp) {
			v = &lp[k-1]
			top = map[string]float32{}
		}
		if k > 0 && k-1 < len(tops) {
			top = c.topMap(tops[k-1])
		}
		l.Tokens, l.TokenLogprobs = append(l.Tokens, seg), append(l.TokenLogprobs, v)
		l.TopLogprobs, l.TextOffset = append(l.TopLogprobs, top), append(l.TextOffset, c.offset[i])
		c.offset[i] += len(seg)
	}
}

// topMap returns alternatives as OpenAI's legacy top_logprobs: text to log-probability.
// Ids with the same text keep the most likely one's.
func (c *completer) topMap(alts []TokenLogprob) map[string]float32 {
	top := make(map[string]float32, len(alts))
	for _, a := range alts {
		t := c.s.tok.Decode([]int32{a.ID})
		if _, ok := top[t]; !ok {
			top[t] = a.Logprob
		}
	}
	return top
}

// addTokens appends generated tokens of choice i to l.
func (c *completer) addTokens(l *completionLogprobs, i int, toks []genToken) {
	for _, t := range toks {
		seg := c.s.tok.Decode([]int32{t.id})
		lp := t.logprob
		top := c.topMap(t.top)
		l.Tokens, l.TokenLogprobs = append(l.Tokens, seg), append(l.TokenLogprobs, &lp)
		l.TopLogprobs, l.TextOffset = append(l.TopLogprobs, top), append(l.TextOffset, c.offset[i])
		c.offset[i] += len(seg)
	}
}

func (c *completer) first(i int) any {
	if !c.req.Echo || c.req.Logprobs != nil {
		return nil // with logprobs, the echo waits for the prompt's log-probabilities
	}
	return c.text(i, c.s.tok.Decode(c.prompts[i/c.n]), nil)
}

func (c *completer) prompt(i int, ev Event) any {
	if !c.req.Echo {
		return nil
	}
	r := c.text(i, c.s.tok.Decode(c.prompts[i/c.n]), nil)
	r.Choices[0].Logprobs = &completionLogprobs{}
	c.addPrompt(r.Choices[0].Logprobs, i, ev.PromptLogprobs, ev.PromptTopLogprobs)
	return r
}

func (c *completer) delta(i int, text string, toks []genToken) any { return c.text(i, text, toks) }

// text returns a chunk of choice i with text and, if logprobs were asked, toks.
func (c *completer) text(i int, text string, toks []genToken) *completion {
	r := c.chunk()
	ch := completionChoice{Index: i, Text: text}
	if c.req.Logprobs != nil && toks != nil {
		ch.Logprobs = &completionLogprobs{}
		c.addTokens(ch.Logprobs, i, toks)
	}
	r.Choices = append(r.Choices, ch)
	return r
}

func (c *completer) final(i int, finish string) any {
	r := c.chunk()
	r.Choices = append(r.Choices, completionChoice{Index: i, FinishReason: &finish})
	return r
}

func (c *completer) usage(u usage) any {
	r := c.chunk()
	r.Usage = &u
	return r
}
