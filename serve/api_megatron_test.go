package serve

import (
	"encoding/json"
	"net/http"
	"reflect"
	"testing"

	"megago/data"
)

// megatronResponse is the answer of PUT /api.
type megatronResponse struct {
	Text     []string    `json:"text"`
	Segments [][]string  `json:"segments"`
	Tokens   [][]int32   `json:"tokens"`
	Logprobs [][]float32 `json:"logprobs"`
}

func TestMegatronShape(t *testing.T) {
	_, url := nullServer(t, 64, 4)
	code, b := call(t, "PUT", url+"/api", `{"prompts": ["5 6", "40"], "tokens_to_generate": 3, "logprobs": true, "unknown_field": 1}`)
	if code != http.StatusOK {
		t.Fatalf("PUT /api = %d %s", code, b)
	}
	var got megatronResponse
	decode(t, b, &got)
	// The fake model continues with id+1; Megatron's text is the prompt, then the
	// generated text; logprobs are those of every token after the first.
	want := megatronResponse{
		Text:     []string{"5 6" + "7 8 9", "40" + "41 42 43"},
		Segments: [][]string{{"5", "6", "7", "8", "9"}, {"40", "41", "42", "43"}},
		Tokens:   [][]int32{{5, 6, 7, 8, 9}, {40, 41, 42, 43}},
		Logprobs: [][]float32{{lp(6), lp(7), lp(8), lp(9)}, {lp(41), lp(42), lp(43)}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("PUT /api = %+v, want %+v", got, want)
	}
	var keys map[string]json.RawMessage
	decode(t, b, &keys)
	if _, ok := keys["logprobs"]; !ok || len(keys) != 4 {
		t.Errorf("keys %v, want text, segments, tokens, logprobs", keys)
	}
	_, b = call(t, "PUT", url+"/api", `{"prompts": ["5"], "tokens_to_generate": 1}`)
	var plain map[string]json.RawMessage
	decode(t, b, &plain)
	if _, ok := plain["logprobs"]; ok {
		t.Errorf("logprobs returned without logprobs: true: %s", b)
	}
}

func TestMegatronStops(t *testing.T) {
	tok := data.BuiltinGPT2()
	f := newFake(tok.VocabSize(), 64, 4)
	_, url := startServer(t, f, tok, ServerConfig{})
	nl, dnl := int32(198), int32(628) // GPT-2's "\n" and "\n\n", which Megatron hard-codes
	if tok.Decode([]int32{nl}) != "\n" || tok.Decode([]int32{dnl}) != "\n\n" {
		t.Fatal("GPT-2's newline ids moved")
	}
	before := tok.Decode([]int32{nl - 2}) // the fake continues nl-2 with nl-1, nl, nl+1, ...
	eod := tok.Special().EOD
	tests := []struct {
		name string
		body string
		want []int32 // generated ids
	}{
		{"stop_on_eol", `{"prompts": [` + quote(before) + `], "tokens_to_generate": 5, "stop_on_eol": true}`, []int32{nl - 1, nl}},
		{"no stop", `{"prompts": [` + quote(before) + `], "tokens_to_generate": 3}`, []int32{nl - 1, nl, nl + 1}},
		{"stop_token", `{"prompts": [` + quote(before) + `], "tokens_to_generate": 5, "stop_token": 199}`, []int32{nl - 1, nl, nl + 1}},
		{"eod", `{"prompts": [` + quote(tok.Decode([]int32{eod - 1})) + `], "tokens_to_generate": 5}`, []int32{eod}},
		{"add_BOS", `{"prompts": [""], "tokens_to_generate": 1, "add_BOS": true}`, []int32{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, b := call(t, "PUT", url+"/api", tt.body)
			if code != http.StatusOK {
				t.Fatalf("PUT /api = %d %s", code, b)
			}
			var got megatronResponse
			decode(t, b, &got)
			gen := got.Tokens[0][len(got.Tokens[0])-len(tt.want):]
			if !reflect.DeepEqual(gen, tt.want) {
				t.Errorf("tokens %v, want them to end with %v", got.Tokens[0], tt.want)
			}
		})
	}
}

func TestMegatronDoubleEOLAndColon(t *testing.T) {
	tok := data.BuiltinGPT2()
	colon := tok.Encode(":")[0]
	f := newFake(tok.VocabSize(), 64, 4)
	_, url := startServer(t, f, tok, ServerConfig{})
	s, _ := NewServer(f, tok, ServerConfig{})
	nl := s.singleID("\n")
	reqs, _, msg := s.megatronRequests(&megatronRequest{prompts: []string{"a"}, tokensToGenerate: 4, stopOnDouble: true, noNewlineAfterColon: true, temperature: 1})
	if msg != "" {
		t.Fatal(msg)
	}
	r := reqs[0]
	if r.Stop([]int32{nl}) || !r.Stop([]int32{nl, nl}) || !r.Stop([]int32{s.singleID("\n\n")}) {
		t.Error("stop_on_double_eol: want a stop after \\n\\n or two \\n, not after one")
	}
	if got := r.Ban([]int32{colon}); !reflect.DeepEqual(got, []int32{nl}) {
		t.Errorf("prevent_newline_after_colon after ':' bans %v, want [%d]", got, nl)
	}
	if got := r.Ban([]int32{nl}); got != nil {
		t.Errorf("prevent_newline_after_colon after '\\n' bans %v, want nothing", got)
	}
	code, _ := call(t, "PUT", url+"/api", `{"prompts": ["a:"], "tokens_to_generate": 2, "prevent_newline_after_colon": true}`)
	if code != http.StatusOK {
		t.Errorf("prevent_newline_after_colon: %d", code)
	}
}

// quote returns s as a JSON string.
func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestMegatronRefusals(t *testing.T) {
	_, url := nullServer(t, 16, 4)
	tests := []struct {
		body, want string
	}{
		{`{}`, "prompts argument required"},
		{`{"prompts": ["1"], "max_len": 3}`, "max_len is no longer used.  Replace with tokens_to_generate"},
		{`{"prompts": ["1"], "sentences": ["a"]}`, "sentences is no longer used.  Replace with prompts"},
		{`{"prompts": ["1"], "beam_width": 2}`, "Beam search is no longer supported."},
		{`{"prompts": "1"}`, "prompts is not a list of strings"},
		{`{"prompts": []}`, "prompts is empty"},
		{`{"prompts": [` + repeatJSON(`"1"`, 129) + `]}`, "Maximum number of prompts is 128"},
		{`{"prompts": ["1"], "tokens_to_generate": 1.5}`, "tokens_to_generate must be an integer greater than 0"},
		{`{"prompts": ["1"], "tokens_to_generate": -1}`, "tokens_to_generate must be an integer greater than or equal to 0"},
		{`{"prompts": ["1"], "logprobs": 1}`, "logprobs must be a boolean value"},
		{`{"prompts": ["1"], "tokens_to_generate": 0}`, "tokens_to_generate=0 implies logprobs should be True"},
		{`{"prompts": ["1"], "temperature": 0}`, "temperature must be a positive number less than or equal to 100.0"},
		{`{"prompts": ["1"], "temperature": "hot"}`, "temperature must be a positive number less than or equal to 100.0"},
		{`{"prompts": ["1"], "top_k": 1001}`, "top_k must be equal to or greater than 0 and less than or equal to 1000"},
		{`{"prompts": ["1"], "top_k": 0.5}`, "top_k must be an integer equal to or greater than 0 and less than or equal to 1000"},
		{`{"prompts": ["1"], "top_p": 1}`, "top_p must be a positive float less than or equal to 1.0"},
		{`{"prompts": ["1"], "top_k": 2, "top_p": 0.5}`, "cannot set both top-k and top-p samplings."},
		{`{"prompts": ["1"], "top_p": 1.5}`, "top_p must be less than or equal to 1.0"},
		{`{"prompts": ["1"], "top_p_decay": 0.5}`, "top_p_decay cannot be set without top_p"},
		{`{"prompts": ["1"], "top_p": 0.5, "top_p_bound": 0.6}`, "top_p_bound must be greater than 0 and less than top_p"},
		{`{"prompts": [""]}`, "Empty prompts require add_BOS=true"},
		{`{"prompts": ["1"], "add_BOS": "yes"}`, "add_BOS must be a boolean value"},
		{`{"prompts": ["1"], "stop_on_eol": 1}`, "stop_on_eol must be a boolean value"},
		{`{"prompts": ["1"], "random_seed": -2}`, "random_seed must be a positive integer"},
		{`{"prompts": ["1"], "stop_token": "x"}`, "stop_token must be an integer"},
		{`{"prompts": ["1"], "length_penalty": 1}`, "length_penalty must be a float"},
		{`{"prompts": ["1 2 3"], "tokens_to_generate": 14}`, "Length of prompt + tokens_to_generate longer than allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			code, b := call(t, "PUT", url+"/api", tt.body)
			var msg string
			decode(t, b, &msg)
			if code != http.StatusBadRequest || msg != tt.want {
				t.Errorf("PUT /api %s = %d %q, want 400 %q", tt.body, code, msg, tt.want)
			}
		})
	}
}

// repeatJSON returns n copies of item separated by commas.
func repeatJSON(item string, n int) string {
	s := item
	for range n - 1 {
		s += "," + item
	}
	return s
}
