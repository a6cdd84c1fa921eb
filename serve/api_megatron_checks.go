package serve

import (
	"encoding/json"
	"slices"
)

// megatronCheck checks one field of a PUT /api body and stores it in the request; a check
// with no field checks a combination of the fields read before it.
type megatronCheck struct {
	field string
	check func(raw json.RawMessage) string // Megatron's message, or "" if it passes
}

// megatronChecks are Megatron's checks after those of prompts, in its order, with its
// messages. As in Python, a boolean passes for an integer (true is 1) but an integer does
// not pass for a float (top_p must be written 0.9, not 1).
func megatronChecks(mr *megatronRequest) []megatronCheck {
	return slices.Concat(megatronLengthChecks(mr), megatronSamplingChecks(mr), megatronStopChecks(mr))
}

// Kinds of JSON value as Python types them (see jsonKind).
func pyInt(raw json.RawMessage) bool   { k := jsonKind(raw); return k == "int" || k == "bool" }
func pyFloat(raw json.RawMessage) bool { return jsonKind(raw) == "float" }
func pyBool(raw json.RawMessage) bool  { return jsonKind(raw) == "bool" }

// boolField checks a boolean field and stores it in dst.
func boolField(field string, dst *bool) megatronCheck {
	return megatronCheck{field, func(raw json.RawMessage) string {
		if !pyBool(raw) {
			return field + " must be a boolean value"
		}
		*dst = parseNumber(raw) == 1
		return ""
	}}
}

// megatronLengthChecks check tokens_to_generate and logprobs.
func megatronLengthChecks(mr *megatronRequest) []megatronCheck {
	return []megatronCheck{
		{"tokens_to_generate", func(raw json.RawMessage) string {
			if !pyInt(raw) {
				return "tokens_to_generate must be an integer greater than 0"
			}
			if mr.tokensToGenerate = int(parseNumber(raw)); mr.tokensToGenerate < 0 {
				return "tokens_to_generate must be an integer greater than or equal to 0"
			}
			return ""
		}},
		boolField("logprobs", &mr.logprobs),
		{"", func(json.RawMessage) string {
			if mr.tokensToGenerate == 0 && !mr.logprobs {
				return "tokens_to_generate=0 implies logprobs should be True"
			}
			return ""
		}},
	}
}

// megatronSamplingChecks check temperature, top_k, top_p, top_p_decay and top_p_bound.
func megatronSamplingChecks(mr *megatronRequest) []megatronCheck {
	return []megatronCheck{
		{"temperature", func(raw json.RawMessage) string {
			mr.temperature = parseNumber(raw)
			if k := jsonKind(raw); (k != "int" && k != "float" && k != "bool") || !(mr.temperature > 0 && mr.temperature <= 100) {
				return "temperature must be a positive number less than or equal to 100.0"
			}
			return ""
		}},
		{"top_k", func(raw json.RawMessage) string {
			if !pyInt(raw) {
				return "top_k must be an integer equal to or greater than 0 and less than or equal to 1000"
			}
			if mr.topK = int(parseNumber(raw)); mr.topK < 0 || mr.topK > 1000 {
				return "top_k must be equal to or greater than 0 and less than or equal to 1000"
			}
			return ""
		}},
		{"top_p", func(raw json.RawMessage) string {
			if !pyFloat(raw) {
				return "top_p must be a positive float less than or equal to 1.0"
			}
			mr.topP = parseNumber(raw)
			if mr.topP > 0 && mr.topK > 0 {
				return "cannot set both top-k and top-p samplings."
			}
			if !(mr.topP >= 0 && mr.topP <= 1) {
				return "top_p must be less than or equal to 1.0"
			}
			return ""
		}},
		{"top_p_decay", func(raw json.RawMessage) string {
			if !pyFloat(raw) {
				return "top_p_decay must be a positive float less than or equal to 1.0"
			}
			if mr.topP == 0 {
				return "top_p_decay cannot be set without top_p"
			}
			if mr.topPDecay = parseNumber(raw); !(mr.topPDecay >= 0 && mr.topPDecay <= 1) {
				return "top_p_decay must be less than or equal to 1.0"
			}
			return ""
		}},
		{"top_p_bound", func(raw json.RawMessage) string {
			if !pyFloat(raw) {
				return "top_p_bound must be a positive float less than or equal to top_p"
			}
			if mr.topP == 0 {
				return "top_p_bound cannot be set without top_p"
			}
			if mr.topPBnd = parseNumber(raw); !(mr.topPBnd > 0 && mr.topPBnd <= mr.topP) {
				return "top_p_bound must be greater than 0 and less than top_p"
			}
			return ""
		}},
	}
}

// megatronStopChecks check add_BOS, the stopping fields, random_seed and length_penalty.
func megatronStopChecks(mr *megatronRequest) []megatronCheck {
	return []megatronCheck{
		boolField("add_BOS", &mr.addBOS),
		{"", func(json.RawMessage) string {
			if slices.Contains(mr.prompts, "") && !mr.addBOS {
				return "Empty prompts require add_BOS=true"
			}
			return ""
		}},
		boolField("stop_on_double_eol", &mr.stopOnDouble),
		boolField("stop_on_eol", &mr.stopOnEOL),
		boolField("prevent_newline_after_colon", &mr.noNewlineAfterColon),
		{"random_seed", func(raw json.RawMessage) string {
			if !pyInt(raw) {
				return "random_seed must be integer"
			}
			if mr.seed = int64(parseNumber(raw)); mr.seed < 0 {
				return "random_seed must be a positive integer"
			}
			return ""
		}},
		{"stop_token", func(raw json.RawMessage) string {
			if !pyInt(raw) {
				return "stop_token must be an integer"
			}
			mr.stopToken, mr.hasStopToken = int64(parseNumber(raw)), true
			return ""
		}},
		{"length_penalty", func(raw json.RawMessage) string {
			if !pyFloat(raw) {
				return "length_penalty must be a float"
			}
			return "" // beam search only, which Megatron no longer has
		}},
	}
}
