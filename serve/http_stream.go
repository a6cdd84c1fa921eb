package serve

import (
	"encoding/json"
	"net/http"
	"sync"
)

// genToken is a generated token with its log-probabilities, as streamed.
type genToken struct {
	id      int32
	logprob float32
	top     []TokenLogprob
}

// chunker makes the chunks of one kind of streamed response (completions or chat); a nil
// chunk is not sent.
type chunker interface {
	first(i int) any                               // before any event of choice i
	prompt(i int, ev Event) any                    // the prompt's log-probabilities arrived
	delta(i int, text string, toks []genToken) any // new text of choice i and its tokens
	final(i int, finish string) any                // choice i ended
	usage(u usage) any                             // after every choice ended
}

// choiceEvent is an event of choice i.
type choiceEvent struct {
	i  int
	ev Event
}

// fanIn merges the events of jobs into one channel, closed when every job's is.
func fanIn(jobs []job) <-chan choiceEvent {
	out := make(chan choiceEvent)
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range j.events {
				out <- choiceEvent{i, ev}
			}
		}()
	}
	go func() { wg.Wait(); close(out) }()
	return out
}

// sse writes server-sent events: each chunk as "data: JSON\n\n", flushed at once.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

// startSSE sends the headers of an event stream.
func startSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	s := &sse{w: w, f: f}
	s.flush()
	return s
}

// send writes v as one event. Write errors (a client gone) are ignored: the request's
// context is cancelled then, which ends the generation.
func (s *sse) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	s.w.Write([]byte("data: "))
	s.w.Write(b)
	s.w.Write([]byte("\n\n"))
	s.flush()
}

// done writes OpenAI's end of stream, "data: [DONE]".
func (s *sse) done() {
	s.w.Write([]byte("data: [DONE]\n\n"))
	s.flush()
}

func (s *sse) flush() {
	if s.f != nil {
		s.f.Flush()
	}
}

// stream streams jobs as server-sent events in mk's chunks: text as it becomes safe to
// show (see textStream), one final chunk per choice, the usage if asked, then [DONE]. A
// stop string cancels its choice's request; a failed request sends an error event.
func (s *Server) stream(w http.ResponseWriter, jobs []job, prompts [][]int32, run *openAIRun, hide []int32, mk chunker) {
	out := startSSE(w)
	texts := make([]*textStream, len(jobs))
	pending := make([][]genToken, len(jobs))
	u := usage{}
	for i := range jobs {
		texts[i] = &textStream{tok: s.tok, stops: run.stops, hide: hide}
		if c := mk.first(i); c != nil {
			out.send(c)
		}
	}
	for _, p := range prompts {
		u.PromptTokens += len(p)
	}
	for ce := range fanIn(jobs) {
		i, ev, ts := ce.i, ce.ev, texts[ce.i]
		switch {
		case ev.PromptLogprobs != nil:
			if c := mk.prompt(i, ev); c != nil {
				out.send(c)
			}
		case ev.Token != nil && !ts.stopped:
			u.CompletionTokens++
			pending[i] = append(pending[i], genToken{ev.Token.ID, ev.Token.Logprob, ev.Token.Top})
			if d, stop := ts.push(ev.Token.ID); d != "" || stop {
				out.send(mk.delta(i, d, pending[i]))
				pending[i] = nil
				if stop {
					jobs[i].cancel()
				}
			}
		}
		if !ev.Done {
			continue
		}
		if d := ts.flush(); d != "" || len(pending[i]) > 0 {
			out.send(mk.delta(i, d, pending[i]))
			pending[i] = nil
		}
		switch {
		case ts.stopped:
			out.send(mk.final(i, "stop"))
		case ev.Err != nil:
			var e openAIError
			e.Error.Message, e.Error.Type = ev.Err.Error(), "server_error"
			out.send(e)
		case ev.FinishReason != "cancelled":
			out.send(mk.final(i, ev.FinishReason))
		}
	}
	if run.usage {
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
		out.send(mk.usage(u))
	}
	out.done()
}
