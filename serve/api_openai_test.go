package serve

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"megago/data"
)

// completionResp is the part of a completions response the tests read.
type completionResp struct {
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int    `json:"index"`
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
		Logprobs     *struct {
			Tokens        []string             `json:"tokens"`
			TokenLogprobs []*float32           `json:"token_logprobs"`
			TopLogprobs   []map[string]float32 `json:"top_logprobs"`
			TextOffset    []int                `json:"text_offset"`
		} `json:"logprobs"`
	} `json:"choices"`
	Usage usage `json:"usage"`
}

func TestCompletions(t *testing.T) {
	_, url := nullServer(t, 64, 8)
	tests := []struct {
		name, body string
		texts      []string
		finish     string
		usage      usage
	}{
		{"text", `{"model": "tiny", "prompt": "5 6", "max_tokens": 3}`, []string{"7 8 9"}, "length", usage{2, 3, 5}},
		{"default max_tokens 16", `{"prompt": "5"}`, []string{"6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21"}, "length", usage{1, 16, 17}},
		{"ids", `{"prompt": [5, 6], "max_tokens": 2}`, []string{"7 8"}, "length", usage{2, 2, 4}},
		{"lists of ids", `{"prompt": [[5], [20]], "max_tokens": 1}`, []string{"6", "21"}, "length", usage{2, 2, 4}},
		{"list of strings, n 2", `{"prompt": ["5", "20"], "max_tokens": 1, "n": 2}`, []string{"6", "6", "21", "21"}, "length", usage{2, 4, 6}},
		{"stop string", `{"prompt": "5", "max_tokens": 10, "stop": " 9"}`, []string{"6 7 8"}, "stop", usage{1, 4, 5}},
		{"stop list", `{"prompt": "5", "max_tokens": 10, "stop": ["x", "7 "]}`, []string{"6 "}, "stop", usage{1, 3, 4}},
		{"eod", `{"prompt": "97", "max_tokens": 10}`, []string{"98"}, "stop", usage{1, 2, 3}},
		{"ignore_eos", `{"prompt": "97", "max_tokens": 3, "ignore_eos": true}`, []string{"98 0"}, "length", usage{1, 3, 4}},
		{"echo", `{"prompt": "5 6", "max_tokens": 1, "echo": true}`, []string{"5 67"}, "length", usage{2, 1, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, b := call(t, "POST", url+"/v1/completions", tt.body)
			if code != http.StatusOK {
				t.Fatalf("POST = %d %s", code, b)
			}
			var got completionResp
			decode(t, b, &got)
			var texts []string
			for i, c := range got.Choices {
				texts = append(texts, c.Text)
				if c.Index != i || c.FinishReason != tt.finish {
					t.Errorf("choice %d: index %d finish %q, want %q", i, c.Index, c.FinishReason, tt.finish)
				}
			}
			if !reflect.DeepEqual(texts, tt.texts) || got.Usage != tt.usage || got.Object != "text_completion" || got.Model != "tiny" {
				t.Errorf("got %s\nwant texts %q usage %+v", b, tt.texts, tt.usage)
			}
		})
	}
}

func TestCompletionsLogprobs(t *testing.T) {
	_, url := nullServer(t, 64, 8)
	// What evaluation harnesses send for log-likelihoods: the prompt's log-probabilities.
	code, b := call(t, "POST", url+"/completions", `{"prompt": "5 6 7", "max_tokens": 0, "echo": true, "logprobs": 1, "temperature": 0}`)
	if code != http.StatusOK {
		t.Fatalf("POST = %d %s", code, b)
	}
	var got completionResp
	decode(t, b, &got)
	l := got.Choices[0].Logprobs
	if got.Choices[0].Text != "5 6 7" || l == nil || !reflect.DeepEqual(l.Tokens, []string{"5", "6", "7"}) ||
		l.TokenLogprobs[0] != nil || *l.TokenLogprobs[1] != lp(6) || *l.TokenLogprobs[2] != lp(7) ||
		!reflect.DeepEqual(l.TextOffset, []int{0, 1, 2}) {
		t.Errorf("echo with max_tokens 0: %s", b)
	}
	code, b = call(t, "POST", url+"/v1/completions", `{"prompt": "5", "max_tokens": 2, "logprobs": 2}`)
	if code != http.StatusOK {
		t.Fatalf("POST = %d %s", code, b)
	}
	got = completionResp{}
	decode(t, b, &got)
	l = got.Choices[0].Logprobs
	wantTop := []map[string]float32{{"6": lp(6), "7": lp(6) - 1}, {"7": lp(7), "8": lp(7) - 1}}
	if l == nil || !reflect.DeepEqual(l.Tokens, []string{"6", "7"}) || *l.TokenLogprobs[0] != lp(6) || !reflect.DeepEqual(l.TopLogprobs, wantTop) {
		t.Errorf("logprobs 2: %s", b)
	}
}

func TestCompletionsStream(t *testing.T) {
	_, url := nullServer(t, 64, 8)
	tests := []struct {
		name, body, want, finish string
	}{
		{"text", `{"prompt": "5", "max_tokens": 4, "stream": true, "stream_options": {"include_usage": true}}`, "6 7 8 9", "length"},
		{"stop", `{"prompt": "5", "max_tokens": 10, "stop": " 9", "stream": true, "stream_options": {"include_usage": true}}`, "6 7 8", "stop"},
		{"echo", `{"prompt": "5", "max_tokens": 2, "echo": true, "stream": true, "stream_options": {"include_usage": true}}`, "56 7", "length"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
				t.Fatalf("status %d, Content-Type %q", resp.StatusCode, ct)
			}
			evs, done := events(t, resp.Body)
			var text, finish string
			var sawUsage bool
			for _, ev := range evs {
				if ev["usage"] != nil {
					sawUsage = true
				}
				for _, c := range ev["choices"].([]any) {
					c := c.(map[string]any)
					text += c["text"].(string)
					if f, ok := c["finish_reason"].(string); ok {
						finish = f
					}
				}
			}
			if text != tt.want || finish != tt.finish || !done || !sawUsage {
				t.Errorf("streamed %q finish %q [DONE] %v usage %v; want %q %q", text, finish, done, sawUsage, tt.want, tt.finish)
			}
		})
	}
}

// chatTestTemplate renders a conversation as its contents, then 9 to start the reply,
// which the NullTokenizer reads as ids.
const chatTestTemplate = `{% for m in messages %}{{ m['content'] + ' ' }}{% endfor %}{% if add_generation_prompt %}9{% endif %}`

// chatServer starts a server with chatTestTemplate.
func chatServer(t *testing.T) string {
	t.Helper()
	tok, _ := data.NewNullTokenizer(testVocab)
	tmpl, err := NewChatTemplate(chatTestTemplate, "", "", "test")
	if err != nil {
		t.Fatal(err)
	}
	_, url := startServer(t, newFake(testVocab, 64, 8), tok, ServerConfig{ChatTemplate: tmpl})
	return url
}

func TestChat(t *testing.T) {
	url := chatServer(t)
	body := `{"model": "megago", "messages": [{"role": "system", "content": "5"}, {"role": "user", "content": [{"type": "text", "text": "6"}]}],
		"max_tokens": 3, "logprobs": true, "top_logprobs": 1}`
	code, b := call(t, "POST", url+"/v1/chat/completions", body)
	if code != http.StatusOK {
		t.Fatalf("POST = %d %s", code, b)
	}
	var got struct {
		Object  string `json:"object"`
		Choices []struct {
			Message      struct{ Role, Content string } `json:"message"`
			FinishReason string                         `json:"finish_reason"`
			Logprobs     struct {
				Content []struct {
					Token       string  `json:"token"`
					Logprob     float32 `json:"logprob"`
					Bytes       []int   `json:"bytes"`
					TopLogprobs []struct {
						Token string `json:"token"`
					} `json:"top_logprobs"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
		Usage usage `json:"usage"`
	}
	decode(t, b, &got)
	c := got.Choices[0] // prompt "5 6 9": the fake continues with 10, 11, 12
	if got.Object != "chat.completion" || c.Message.Role != "assistant" || c.Message.Content != "10 11 12" || c.FinishReason != "length" ||
		got.Usage != (usage{3, 3, 6}) || len(c.Logprobs.Content) != 3 || c.Logprobs.Content[0].Token != "10" ||
		c.Logprobs.Content[0].Logprob != lp(10) || !reflect.DeepEqual(c.Logprobs.Content[0].Bytes, []int{'1', '0'}) ||
		len(c.Logprobs.Content[0].TopLogprobs) != 1 {
		t.Errorf("chat: %s", b)
	}
}

func TestChatStream(t *testing.T) {
	url := chatServer(t)
	resp, err := http.Post(url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"messages": [{"role": "user", "content": "5"}], "max_tokens": 3, "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	evs, done := events(t, resp.Body)
	var content, role, finish string
	for _, ev := range evs {
		if ev["object"] != "chat.completion.chunk" {
			t.Errorf("object %v", ev["object"])
		}
		for _, c := range ev["choices"].([]any) {
			c := c.(map[string]any)
			d := c["delta"].(map[string]any)
			if r, ok := d["role"].(string); ok {
				role = r
			}
			if s, ok := d["content"].(string); ok {
				content += s
			}
			if f, ok := c["finish_reason"].(string); ok {
				finish = f
			}
		}
	}
	if content != "10 11 12" || role != "assistant" || finish != "length" || !done {
		t.Errorf("streamed %q role %q finish %q [DONE] %v", content, role, finish, done)
	}
}
