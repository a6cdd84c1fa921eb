package serve

import (
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"

	"megago/data"
)

// lmEvalChoice is what lm-evaluation-harness reads of a completions choice, parsed as
// Python's json does (numbers as float64).
type lmEvalChoice struct {
	Index    int `json:"index"`
	Logprobs struct {
		TokenLogprobs []*float64           `json:"token_logprobs"`
		TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	} `json:"logprobs"`
}

// lmEvalParse is LocalCompletionsAPI.parse_logprobs (lm_eval/models/openai_completions.py):
// for each choice by index, the sum of token_logprobs over the continuation
// [ctxlen:len-trim] and whether each of them equals the largest of its top_logprobs.
// trim is 1 for today's requests (max_tokens 1: the generated token is dropped), 0 for
// lm-eval ≤ 0.4.2's (max_tokens 0).
func lmEvalParse(t *testing.T, body []byte, ctxlens []int, trim int) (sums []float64, greedy []bool) {
	t.Helper()
	var resp struct {
		Choices []lmEvalChoice `json:"choices"`
	}
	decode(t, body, &resp)
	slices.SortFunc(resp.Choices, func(a, b lmEvalChoice) int { return a.Index - b.Index })
	for i, ch := range resp.Choices {
		lps := ch.Logprobs.TokenLogprobs
		tops := ch.Logprobs.TopLogprobs
		end := len(lps) - trim
		sum, isGreedy := 0.0, true
		for k := ctxlens[i]; k < end; k++ {
			if lps[k] == nil || len(tops[k]) == 0 {
				t.Fatalf("choice %d position %d: token_logprobs %v, top_logprobs %v: lm-eval needs both", i, k, lps[k], tops[k])
			}
			sum += *lps[k]
			best := math.Inf(-1)
			for _, v := range tops[k] {
				best = max(best, v)
			}
			isGreedy = isGreedy && *lps[k] == best
		}
		sums, greedy = append(sums, sum), append(greedy, isGreedy)
	}
	return sums, greedy
}

// TestLMEvalLoglikelihood sends lm-evaluation-harness's loglikelihood requests (token ids
// of context + continuation, echo, logprobs, max_tokens 1 today and 0 before 0.4.3) to a
// server on a real engine, parses the answer as lm-eval does, and compares with a full
// forward's log-softmax: the continuation's summed log-probability, and is_greedy (every
// continuation token the argmax after its prefix).
func TestLMEvalLoglikelihood(t *testing.T) {
	models := testModels(t, testConfigs()["gpt2"], 1)
	m := models[0]
	e := testEngine(t, models, EngineConfig{MaxSeqLen: 48, PrefillChunk: 7})
	tok, err := data.NewNullTokenizer(testVocab)
	if err != nil {
		t.Fatal(err)
	}
	_, url := startServer(t, e, tok, ServerConfig{ModelName: "tiny"})

	// A greedy continuation (the reference's argmax chain) and a non-greedy one.
	ctx := []int32{5, 17, 42, 8, 63, 21, 9, 30, 2, 77}
	greedyCont := slices.Clone(ctx)
	for range 5 {
		rows := logSoftmaxRows(m, greedyCont)
		last := rows[len(rows)-1]
		greedyCont = append(greedyCont, int32(slices.Index(last, slices.Max(last))))
	}
	greedyCont = greedyCont[len(ctx):]
	otherCont := []int32{(greedyCont[0] + 1) % 97, 3, 50}
	inputs := [][]int32{append(slices.Clone(ctx), greedyCont...), append(slices.Clone(ctx[3:]), otherCont...)}
	ctxlens := []int{len(ctx), len(ctx) - 3}
	wantSums, wantGreedy := make([]float64, len(inputs)), make([]bool, len(inputs))
	for i, in := range inputs {
		rows := logSoftmaxRows(m, in)
		wantGreedy[i] = true
		for k := ctxlens[i]; k < len(in); k++ {
			wantSums[i] += rows[k-1][in[k]]
			wantGreedy[i] = wantGreedy[i] && slices.Index(rows[k-1], slices.Max(rows[k-1])) == int(in[k])
		}
	}
	if !wantGreedy[0] || wantGreedy[1] {
		t.Fatalf("reference is_greedy %v, want [true false]", wantGreedy)
	}
	prompt, _ := json.Marshal(inputs)
	tests := []struct {
		name, body string
		trim       int
	}{
		{"lm-eval 0.4.3+", `{"model": "tiny", "prompt": ` + string(prompt) + `, "temperature": 0, "max_tokens": 1, "logprobs": 1, "seed": 1234, "echo": true}`, 1},
		{"lm-eval 0.4.0-0.4.2", `{"model": "tiny", "prompt": ` + string(prompt) + `, "echo": true, "max_tokens": 0, "temperature": 0.0, "logprobs": 10, "seed": 1234}`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, b := call(t, http.MethodPost, url+"/v1/completions", tt.body)
			if code != http.StatusOK {
				t.Fatalf("POST = %d %s", code, b)
			}
			sums, greedy := lmEvalParse(t, b, ctxlens, tt.trim)
			if !slices.Equal(greedy, wantGreedy) {
				t.Errorf("is_greedy %v, want %v", greedy, wantGreedy)
			}
			for i := range sums {
				// float32 log-probabilities, summed over ≤ 5 tokens
				if math.Abs(sums[i]-wantSums[i]) > 1e-4 {
					t.Errorf("request %d: loglikelihood %v, want %v", i, sums[i], wantSums[i])
				}
			}
		})
	}
}

// TestEchoLogprobsStream: streamed, echo with logprobs gives the same prompt and token
// log-probabilities and alternatives as the whole response, and the echo of a one-token
// prompt (no log-probabilities to wait for) is not lost.
func TestEchoLogprobsStream(t *testing.T) {
	models := testModels(t, testConfigs()["gpt2"], 1)
	e := testEngine(t, models, EngineConfig{MaxSeqLen: 32})
	tok, err := data.NewNullTokenizer(testVocab)
	if err != nil {
		t.Fatal(err)
	}
	_, url := startServer(t, e, tok, ServerConfig{ModelName: "tiny"})
	for _, prompt := range []string{"[5, 17, 42, 8]", "[5]"} {
		body := `{"prompt": ` + prompt + `, "max_tokens": 2, "logprobs": 2, "echo": true, "temperature": 0`
		code, b := call(t, http.MethodPost, url+"/v1/completions", body+`}`)
		if code != http.StatusOK {
			t.Fatalf("POST = %d %s", code, b)
		}
		var whole completionResp
		decode(t, b, &whole)
		want, _ := json.Marshal(whole.Choices[0].Logprobs)

		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body+`, "stream": true}`))
		if err != nil {
			t.Fatal(err)
		}
		evs, _ := events(t, resp.Body)
		resp.Body.Close()
		var text string
		var lps struct {
			Tokens        []string             `json:"tokens"`
			TokenLogprobs []*float32           `json:"token_logprobs"`
			TopLogprobs   []map[string]float32 `json:"top_logprobs"`
			TextOffset    []int                `json:"text_offset"`
		}
		for _, ev := range evs {
			var chunk completionResp
			raw, _ := json.Marshal(ev)
			decode(t, raw, &chunk)
			for _, c := range chunk.Choices {
				text += c.Text
				if l := c.Logprobs; l != nil {
					lps.Tokens, lps.TokenLogprobs = append(lps.Tokens, l.Tokens...), append(lps.TokenLogprobs, l.TokenLogprobs...)
					lps.TopLogprobs, lps.TextOffset = append(lps.TopLogprobs, l.TopLogprobs...), append(lps.TextOffset, l.TextOffset...)
				}
			}
		}
		got, _ := json.Marshal(lps)
		if text != whole.Choices[0].Text || string(got) != string(want) {
			t.Errorf("prompt %s: streamed %q %s\nwhole %q %s", prompt, text, got, whole.Choices[0].Text, want)
		}
	}
}
