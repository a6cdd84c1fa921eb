package serve

import (
	"encoding/json"
	"net/http"
	"strings"
)

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	openAIParams
	Messages            []chatMessageJSON `json:"messages"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	Logprobs            bool              `json:"logprobs"`
	TopLogprobs         *int              `json:"top_logprobs"`
}

// chatMessageJSON is a message as OpenAI writes it: content a string or a list of text
// parts.
type chatMessageJSON struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Name    string          `json:"name,omitempty"`
}

// chatLogprob is a token of OpenAI's chat logprobs.content.
type chatLogprob struct {
	Token       string        `json:"token"`
	Logprob     float32       `json:"logprob"`
	Bytes       []int         `json:"bytes"`
	TopLogprobs []chatLogprob `json:"top_logprobs,omitempty"`
}

// chatChoice is a choice of a chat response (Message) or stream chunk (Delta).
type chatChoice struct {
	Index        int           `json:"index"`
	Message      *chatMessage  `json:"message,omitempty"`
	Delta        *chatMessage  `json:"delta,omitempty"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

// chatMessage is an assistant message of a response; in a delta its fields may be absent.
type chatMessage struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// chatLogprobs is OpenAI's logprobs of a chat choice.
type chatLogprobs struct {
	Content []chatLogprob `json:"content"`
}

// chatCompletion is a chat response or stream chunk.
type chatCompletion = response[chatChoice]

// handleChat serves OpenAI's POST /v1/chat/completions: the conversation rendered with
// the chat template and add_generation_prompt, then generated like a completion up to the
// rest of the context by default.
func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	err := decodeBody(r, &req)
	if err == nil && req.MaxCompletionTokens != nil {
		if req.MaxTokens != nil {
			err = badRequest("max_completion_tokens", "give max_tokens or max_completion_tokens, not both")
		}
		req.MaxTokens = req.MaxCompletionTokens
	}
	var run *openAIRun
	if err == nil {
		run, err = s.checkParams(&req.openAIParams, -1)
	}
	var prompt []int32
	if err == nil {
		prompt, err = s.chatPrompt(&req)
	}
	var reqs []Request
	if err == nil {
		reqs, err = s.requests(run, [][]int32{prompt}, "messages", s.stopIDs())
	}
	if err != nil {
		s.refuseErr(w, r, err)
		return
	}
	for i := range reqs {
		if req.Logprobs {
			reqs[i].Logprobs = true
			if req.TopLogprobs != nil {
				reqs[i].TopLogprobs = *req.TopLogprobs
			}
		}
	}
	jobs, err := s.submitAll(r.Context(), reqs)
	if err != nil {
		s.refuseErr(w, r, err)
		return
	}
	c := &chatter{s: s, id: s.nextID("chatcmpl"), logprobs: req.Logprobs}
	if run.stream {
		s.stream(w, jobs, [][]int32{prompt}, run, s.stopIDs(), c)
		return
	}
	out := s.collectAll(jobs, run.stops, s.stopIDs())
	if err := firstErr(out); err != nil {
		s.refuse(w, r, http.StatusInternalServerError, err.Error(), "")
		return
	}
	resp := c.chunk("chat.completion")
	for i, o := range out {
		ch := chatChoice{Index: i, Message: &chatMessage{Role: "assistant", Content: &o.text}, FinishReason: &o.finish}
		if req.Logprobs {
			ch.Logprobs = c.logprobsOf(tokensOf(o))
		}
		resp.Choices = append(resp.Choices, ch)
	}
	u := countUsage([][]int32{prompt}, out)
	resp.Usage = &u
	writeJSON(w, http.StatusOK, resp)
}

// chatPrompt checks the chat-only fields and returns the ids of the rendered conversation.
func (s *Server) chatPrompt(req *chatRequest) ([]int32, error) {
	if t := req.TopLogprobs; t != nil {
		if !req.Logprobs {
			return nil, badRequest("top_logprobs", "top_logprobs: requires logprobs: true")
		}
		if *t < 0 || *t > maxTopLogprobs {
			return nil, badRequest("top_logprobs", "top_logprobs: %d must be in [0, %d]", *t, maxTopLogprobs)
		}
	}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages", "messages: want at least one message")
	}
	msgs := make([]ChatMessage, len(req.Messages))
	for i, m := range req.Messages {
		if m.Role == "" {
			return nil, badRequest("messages", "messages[%d].role is required", i)
		}
		text, err := messageText(m.Content)
		if err != nil {
			return nil, badRequest("messages", "messages[%d].content: %v", i, err)
		}
		msgs[i] = ChatMessage{Role: m.Role, Content: text}
	}
	text, err := s.cfg.ChatTemplate.Render(msgs, true)
	if err != nil {
		return nil, badRequest("messages", "%v", err)
	}
	ids := s.tok.Encode(text)
	// The template writes the BOS token itself; a tokenizer that adds one too doubles it.
	if bos := s.tok.Special().BOS; len(ids) >= 2 && bos >= 0 && ids[0] == bos && ids[1] == bos {
		ids = ids[1:]
	}
	return ids, nil
}

// messageText reads a message's content: a string, null, or a list of {type: "text",
// text} parts (joined).
func messageText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || isNull(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errString("want a string or a list of text parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", errString("only text parts are supported, not " + p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// errString is an error that is its message.
type errString string

func (e errString) Error() string { return string(e) }

// chatter makes the chunks of a chat response.
type chatter struct {
	s        *Server
	id       string
	logprobs bool
}

// chunk returns an empty chat response of the given object type.
func (c *chatter) chunk(object string) *chatCompletion {
	return &chatCompletion{ID: c.id, Object: object, Created: c.s.created, Model: c.s.cfg.ModelName, Choices: []chatChoice{}}
}

// logprobsOf returns toks as chat logprobs.
func (c *chatter) logprobsOf(toks []genToken) *chatLogprobs {
	l := &chatLogprobs{Content: []chatLogprob{}}
	for _, t := range toks {
		e := c.entry(t.id, t.logprob)
		for _, a := range t.top {
			e.TopLogprobs = append(e.TopLogprobs, c.entry(a.ID, a.Logprob))
		}
		l.Content = append(l.Content, e)
	}
	return l
}

// entry returns id's logprob entry with its text and bytes.
func (c *chatter) entry(id int32, lp float32) chatLogprob {
	text := c.s.tok.Decode([]int32{id})
	b := make([]int, len(text))
	for k := range len(text) {
		b[k] = int(text[k])
	}
	return chatLogprob{Token: text, Logprob: lp, Bytes: b}
}

func (c *chatter) first(i int) any {
	empty := ""
	r := c.chunk("chat.completion.chunk")
	r.Choices = append(r.Choices, chatChoice{Index: i, Delta: &chatMessage{Role: "assistant", Content: &empty}})
	return r
}

func (c *chatter) prompt(int, Event) any { return nil }

func (c *chatter) delta(i int, text string, toks []genToken) any {
	r := c.chunk("chat.completion.chunk")
	ch := chatChoice{Index: i, Delta: &chatMessage{Content: &text}}
	if c.logprobs {
		ch.Logprobs = c.logprobsOf(toks)
	}
	r.Choices = append(r.Choices, ch)
	return r
}

func (c *chatter) final(i int, finish string) any {
	r := c.chunk("chat.completion.chunk")
	r.Choices = append(r.Choices, chatChoice{Index: i, Delta: &chatMessage{}, FinishReason: &finish})
	return r
}

func (c *chatter) usage(u usage) any {
	r := c.chunk("chat.completion.chunk")
	r.Usage = &u
	return r
}
