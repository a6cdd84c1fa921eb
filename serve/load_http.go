package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// RunHTTPLoad drives the OpenAI completions route of the server at baseURL
// (http://HOST:PORT) as RunLoad drives an engine: o.Clients closed-loop clients, each
// with one request outstanding, share o.Requests streamed requests, each a prompt of
// o.PromptLen random ids below o.Vocab asking for exactly o.NewTokens greedy tokens
// (ignore_eos). Time to first token is the time to the first streamed chunk with
// text; generated tokens are the usage the server reports. model names the served
// model ("" leaves it out). client sends the requests (nil: one that keeps a
// connection per client). It returns the first request error (a refusal with its
// status and message).
func RunHTTPLoad(ctx context.Context, client *http.Client, baseURL, model string, o LoadOptions) (LoadReport, error) {
	if err := o.check("RunHTTPLoad"); err != nil {
		return LoadReport{}, err
	}
	if client == nil {
		client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.Clients}}
	}
	url := strings.TrimRight(baseURL, "/") + "/v1/completions"
	return closedLoop(ctx, o, func(ctx context.Context, i int) (Stats, error) {
		body, err := json.Marshal(loadBody{Model: model, Prompt: loadPrompt(o, i), MaxTokens: o.NewTokens,
			IgnoreEOS: true, Stream: true, StreamOptions: streamOptions{IncludeUsage: true}})
		if err != nil {
			return Stats{}, err
		}
		s, err := httpLoadRequest(ctx, client, url, body)
		if err != nil {
			return s, fmt.Errorf("request %d: %w", i, err)
		}
		return s, nil
	})
}

// loadBody is the completions request of RunHTTPLoad: greedy (temperature 0).
type loadBody struct {
	Model         string        `json:"model,omitempty"`
	Prompt        []int32       `json:"prompt"`
	MaxTokens     int           `json:"max_tokens"`
	Temperature   float64       `json:"temperature"`
	IgnoreEOS     bool          `json:"ignore_eos"`
	Stream        bool          `json:"stream"`
	StreamOptions streamOptions `json:"stream_options"`
}

// httpLoadRequest sends one streamed completion request and times it.
func httpLoadRequest(ctx context.Context, client *http.Client, url string, body []byte) (Stats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return Stats{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return Stats{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return Stats{}, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	var s Stats
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			s.Total = time.Since(start)
			if s.TimeToFirst == 0 { // no text at all: the first token came with the end
				s.TimeToFirst = s.Total
			}
			return s, nil
		}
		var chunk struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage *usage `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return s, fmt.Errorf("stream chunk %q: %w", data, err)
		}
		switch {
		case chunk.Error != nil:
			return s, fmt.Errorf("server error: %s", chunk.Error.Message)
		case chunk.Usage != nil:
			s.PromptTokens, s.GeneratedTokens = chunk.Usage.PromptTokens, chunk.Usage.CompletionTokens
		case s.TimeToFirst == 0 && len(chunk.Choices) > 0 && chunk.Choices[0].Text != "":
			s.TimeToFirst = time.Since(start)
		}
	}
	if err := sc.Err(); err != nil {
		return s, err
	}
	return s, fmt.Errorf("stream ended without [DONE]")
}
