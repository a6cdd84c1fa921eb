package serve

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
)

// megatronRequest is a PUT /api body after Megatron's checks, with its defaults.
type megatronRequest struct {
	prompts                  []string
	tokensToGenerate         int
	logprobs                 bool
	temperature              float64
	topK                     int
	topP, topPDecay, topPBnd float64
	addBOS                   bool
	stopOnEOL, stopOnDouble  bool
	noNewlineAfterColon      bool
	seed                     int64
	stopToken                int64
	hasStopToken             bool
}

// handleMegatron serves PUT /api as Megatron-LM's text generation server does: the same
// fields, defaults and refusal messages (text_generation_server.py), unknown fields
// ignored, and the answer {text, segments, tokens[, logprobs]} with, for each prompt, the
// prompt followed by its generated text, the text of each token, the ids of prompt and
// generation, and the log-probability of every token after the first. Megatron answers
// some refusals with status 200; megago answers every refusal with 400.
func (s *Server) handleMegatron(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		s.refuseErr(w, r, err)
		return
	}
	mr, msg := parseMegatron(body)
	if msg != "" {
		s.refuse(w, r, http.StatusBadRequest, msg, "")
		return
	}
	reqs, prompts, msg := s.megatronRequests(mr)
	if msg != "" {
		s.refuse(w, r, http.StatusBadRequest, msg, "")
		return
	}
	jobs, err := s.submitAll(r.Context(), reqs)
	if err != nil {
		s.refuseErr(w, r, err)
		return
	}
	out := s.collectAll(jobs, nil, nil)
	if err := firstErr(out); err != nil {
		s.refuse(w, r, http.StatusInternalServerError, err.Error(), "")
		return
	}
	resp := map[string]any{}
	texts, segs, toks, lps := make([]string, len(out)), make([][]string, len(out)), make([][]int32, len(out)), make([][]float32, len(out))
	for i, o := range out {
		texts[i] = mr.prompts[i] + s.tok.Decode(o.ids)
		toks[i] = append(slices.Clone(prompts[i]), o.ids...)
		segs[i] = s.segments(toks[i])
		lps[i] = append(slices.Clone(o.prompt), o.logprobs...)
	}
	resp["text"], resp["segments"], resp["tokens"] = texts, segs, toks
	if mr.logprobs {
		resp["logprobs"] = lps
	}
	writeJSON(w, http.StatusOK, resp)
}

// megatronRequests turns mr into one engine request per prompt, with the prompts' ids,
// or returns Megatron's message for a prompt too long.
func (s *Server) megatronRequests(mr *megatronRequest) ([]Request, [][]int32, string) {
	eod := s.tok.Special().EOD
	stop := []int32{}
	if eod >= 0 {
		stop = append(stop, eod)
	}
	if mr.hasStopToken && mr.stopToken >= 0 && mr.stopToken < int64(s.gen.Vocab()) {
		stop = append(stop, int32(mr.stopToken))
	}
	seed := uint64(mr.seed)
	if mr.seed < 0 {
		seed = rand.Uint64()
	}
	nl, dnl := s.singleID("\n"), s.singleID("\n\n")
	colon := s.singleID(":")
	reqs := make([]Request, len(mr.prompts))
	ids := make([][]int32, len(mr.prompts))
	for i, p := range mr.prompts {
		ids[i] = s.tok.Encode(p)
		if mr.addBOS {
			ids[i] = append([]int32{eod}, ids[i]...)
		}
		if len(ids[i]) == 0 {
			return nil, nil, "Empty prompts require add_BOS=true"
		}
		if len(ids[i])+mr.tokensToGenerate > s.gen.MaxSeqLen() {
			return nil, nil, "Length of prompt + tokens_to_generate longer than allowed"
		}
		reqs[i] = Request{Prompt: ids[i], MaxNewTokens: mr.tokensToGenerate, StopIDs: stop,
			Logprobs: mr.logprobs, PromptLogprobs: mr.logprobs,
			Sampling: Sampling{Temperature: mr.temperature, TopK: mr.topK, TopP: mr.topP,
				TopPDecay: mr.topPDecay, TopPBound: mr.topPBnd, Seed: seed + uint64(i)}}
		last := ids[i][len(ids[i])-1]
		switch {
		case mr.stopOnDouble:
			reqs[i].Stop = func(g []int32) bool { return endsDoubleEOL(last, g, nl, dnl) }
		case mr.stopOnEOL:
			reqs[i].Stop = func(g []int32) bool { t := g[len(g)-1]; return t >= 0 && (t == nl || t == dnl) }
		}
		if mr.noNewlineAfterColon && colon >= 0 && nl >= 0 {
			reqs[i].Ban = func(g []int32) []int32 {
				if prev := lastOf(last, g); prev == colon {
					return []int32{nl}
				}
				return nil
			}
		}
	}
	return reqs, ids, ""
}

// endsDoubleEOL is Megatron's stop_on_double_eol: the new token is "\n\n", or "\n" after
// a "\n" (which may be the prompt's last token).
func endsDoubleEOL(promptLast int32, g []int32, nl, dnl int32) bool {
	t := g[len(g)-1]
	if t < 0 || (t != nl && t != dnl) {
		return false
	}
	return t == dnl || lastOf(promptLast, g[:len(g)-1]) == nl
}

// lastOf returns the last id of g, or promptLast when g is empty.
func lastOf(promptLast int32, g []int32) int32 {
	if len(g) == 0 {
		return promptLast
	}
	return g[len(g)-1]
}

// singleID returns the id of text if the tokenizer encodes it as one token (Megatron
// hard-codes GPT-2's 198 for "\n" and 628 for "\n\n"), else -1.
func (s *Server) singleID(text string) int32 {
	ids := s.tok.Encode(text)
	if bos := s.tok.Special().BOS; len(ids) == 2 && bos >= 0 && ids[0] == bos {
		ids = ids[1:]
	}
	if len(ids) != 1 || s.tok.Decode(ids) != text {
		return -1
	}
	return ids[0]
}

// parseMegatron checks a PUT /api body as Megatron's MegatronGenerate.put does, in its
// order, and returns its first refusal message, or the request with defaults filled.
func parseMegatron(body []byte) (*megatronRequest, string) {
	var f map[string]json.RawMessage
	if err := json.Unmarshal(body, &f); err != nil {
		return nil, "request body must be a JSON object"
	}
	switch {
	case f["prompts"] == nil:
		return nil, "prompts argument required"
	case f["max_len"] != nil:
		return nil, "max_len is no longer used.  Replace with tokens_to_generate"
	case f["sentences"] != nil:
		return nil, "sentences is no longer used.  Replace with prompts"
	case f["beam_width"] != nil:
		return nil, "Beam search is no longer supported."
	}
	mr := &megatronRequest{tokensToGenerate: 64, temperature: 1, seed: -1}
	if err := json.Unmarshal(f["prompts"], &mr.prompts); err != nil || isNull(f["prompts"]) {
		return nil, "prompts is not a list of strings"
	}
	if len(mr.prompts) == 0 {
		return nil, "prompts is empty"
	}
	if len(mr.prompts) > 128 {
		return nil, "Maximum number of prompts is 128"
	}
	for _, c := range megatronChecks(mr) {
		raw, ok := f[c.field]
		if !ok && c.field != "" {
			continue
		}
		if msg := c.check(raw); msg != "" {
			return nil, msg
		}
	}
	return mr, ""
}

// isNull reports whether raw is JSON null.
func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// jsonKind classifies a JSON value as Python's json module types it: "int" (a number
// without fraction or exponent), "float", "bool", or "other".
func jsonKind(raw json.RawMessage) string {
	t := bytes.TrimSpace(raw)
	switch {
	case bytes.Equal(t, []byte("true")), bytes.Equal(t, []byte("false")):
		return "bool"
	case len(t) == 0 || !(t[0] == '-' || t[0] >= '0' && t[0] <= '9'):
		return "other"
	case bytes.ContainsAny(t, ".eE"):
		return "float"
	}
	return "int"
}

// parseNumber parses a JSON number (or a boolean as Python's 1 and 0).
func parseNumber(raw json.RawMessage) float64 {
	t := string(bytes.TrimSpace(raw))
	switch t {
	case "true":
		return 1
	case "false":
		return 0
	}
	v, _ := strconv.ParseFloat(t, 64)
	return v
}
