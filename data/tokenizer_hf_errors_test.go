package data

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tinyHFJSON is a small character-level BPE tokenizer.json: a, b, ab and <0x00>..<0xFF>.
func tinyHFJSON(t testing.TB, edit func(m map[string]any)) []byte {
	t.Helper()
	vocab := map[string]any{"a": 0, "b": 1, "ab": 2, "<unk>": 3}
	model := map[string]any{"type": "BPE", "vocab": vocab, "merges": []any{"a b"}, "unk_token": "<unk>"}
	m := map[string]any{
		"added_tokens":   []any{map[string]any{"id": 4, "content": "<s>", "special": true}},
		"normalizer":     nil,
		"pre_tokenizer":  nil,
		"post_processor": nil,
		"decoder":        nil,
		"model":          model,
	}
	if edit != nil {
		edit(m)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHFTokenizerTiny(t *testing.T) {
	for _, fuse := range []bool{false, true} {
		tj := tinyHFJSON(t, func(m map[string]any) { m["model"].(map[string]any)["fuse_unk"] = fuse })
		tok, err := ReadHFTokenizer(bytes.NewReader(tj), strings.NewReader(`{"bos_token": {"content": "<s>"}, "eos_token": null}`), true)
		if err != nil {
			t.Fatal(err)
		}
		// "abab<s>ba c": ab ab <s> b a, then <unk> for " " and for "c", one for both if fused.
		got := tok.Encode("abab<s>ba c")
		want := []int32{2, 2, 4, 1, 0, 3, 3}
		if fuse {
			want = want[:6]
		}
		if !slices.Equal(got, want) {
			t.Errorf("fuse_unk %v: Encode = %v, want %v", fuse, got, want)
		}
		if s := tok.Special(); s.BOS != 4 || s.EOS != -1 || s.EOD != -1 || tok.VocabSize() != 5 {
			t.Errorf("Special = %+v, VocabSize = %d", s, tok.VocabSize())
		}
	}
}

func TestHFTokenizerErrors(t *testing.T) {
	set := func(path string, v any) func(map[string]any) {
		return func(m map[string]any) {
			keys := strings.Split(path, ".")
			for _, k := range keys[:len(keys)-1] {
				m = m[k].(map[string]any)
			}
			m[keys[len(keys)-1]] = v
		}
	}
	seq := func(kind string, items ...any) map[string]any {
		return map[string]any{"type": "Sequence", kind: items}
	}
	cases := []struct {
		name string
		edit func(map[string]any)
		cfg  string
		want string
	}{
		{"model type", set("model.type", "Unigram"), "", `model.type "Unigram"`},
		{"wordpiece unk", func(m map[string]any) { set("model.type", "WordPiece")(m); set("model.unk_token", nil)(m) }, "", "model.unk_token: a WordPiece model needs one"},
		{"wordpiece chars", func(m map[string]any) { set("model.type", "WordPiece")(m); set("model.max_input_chars_per_word", 0)(m) }, "", "model.max_input_chars_per_word 0"},
		{"no vocab", set("model.vocab", map[string]any{}), "", "model.vocab is empty"},
		{"huge id", set("model.vocab", map[string]any{"a": 1 << 40}), "", `model.vocab: token "a" has id 1099511627776`},
		{"negative id", set("model.vocab", map[string]any{"a": -1}), "", `model.vocab: token "a" has id -1`},
		{"merge token", set("model.merges", []any{"a c"}), "", `model.merges[0]: "a" + "c"`},
		{"merge form", set("model.merges", []any{"abc"}), "", `model.merges[0]: "abc" is not two tokens`},
		{"merge pair", set("model.merges", []any{[]any{"a"}}), "", `model.merges[0]: ["a"] is neither`},
		{"unk", set("model.unk_token", "<x>"), "", `model.unk_token "<x>"`},
		{"byte fallback", set("model.byte_fallback", true), "", "model.byte_fallback: no token <0x00>"},
		{"suffix", set("model.end_of_word_suffix", "</w>"), "", "model.end_of_word_suffix"},
		{"added id", set("added_tokens", []any{map[string]any{"id": 99, "content": "<s>"}}), "", `added_tokens[0]: "<s>" has id 99`},
		{"added empty", set("added_tokens", []any{map[string]any{"id": 4, "content": ""}}), "", "added_tokens[0] (id 4): empty content"},
		{"normalizer", set("normalizer", seq("normalizers", map[string]any{"type": "NFC"}, map[string]any{"type": "StripAccents"})), "", `normalizer.normalizers[1].type "StripAccents"`},
		{"replace regex", set("normalizer", map[string]any{"type": "Replace", "pattern": map[string]any{"Regex": " +"}, "content": " "}), "", "normalizer: Replace with a regex"},
		{"split regex", set("pre_tokenizer", seq("pretokenizers", map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\w+(?=x)`}, "behavior": "Isolated"})), "", `pre_tokenizer.pretokenizers[0]: Split regex "\\w+(?=x)" is not one of the patterns megago knows`},
		{"split behavior", set("pre_tokenizer", map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "x"}, "behavior": "Removed"}), "", `Split behavior "Removed"`},
		{"pre-tokenizer", set("pre_tokenizer", map[string]any{"type": "Whitespace"}), "", `pre_tokenizer.type "Whitespace"`},
		{"byte-level bytes", set("pre_tokenizer", map[string]any{"type": "ByteLevel"}), "", "byte-level BPE has no token for the byte 0x00"},
		{"post-processor", set("post_processor", map[string]any{"type": "ByteLevelish"}), "", `post_processor.type "ByteLevelish"`},
		{"bert processing", set("post_processor", map[string]any{"type": "BertProcessing", "cls": []any{"<s>", 4}, "sep": []any{"</s>"}}), "", "post_processor.sep: want [token, id]"},
		{"roberta processing", set("post_processor", map[string]any{"type": "RobertaProcessing", "cls": []any{"<s>", 9}, "sep": []any{"<s>", 4}}), "", "post_processor.cls: id 9 outside [0, 5)"},
		{"template token", set("post_processor", map[string]any{"type": "TemplateProcessing", "single": []any{map[string]any{"SpecialToken": map[string]any{"id": "<x>"}}}}), "", `post_processor.single[0]: special token "<x>"`},
		{"template id", set("post_processor", map[string]any{"type": "TemplateProcessing", "single": []any{map[string]any{"SpecialToken": map[string]any{"id": "<x>"}}},
			"special_tokens": map[string]any{"<x>": map[string]any{"ids": []any{77}}}}), "", `post_processor.special_tokens["<x>"]: id 77`},
		{"decoder", set("decoder", map[string]any{"type": "CTC"}), "", `decoder.type "CTC"`},
		{"strip", set("decoder", map[string]any{"type": "Strip", "content": " ", "start": 1}), "", "decoder: Strip is supported only after Fuse"},
		{"field type", set("model.fuse_unk", "yes"), "", "tokenizer.json: json: cannot unmarshal string"},
		{"config token", nil, `{"eos_token": "</s>"}`, `tokenizer_config.json: eos_token "</s>" is not a token`},
		{"config form", nil, `{"bos_token": 3}`, `tokenizer_config.json: bos_token: neither a string`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var cfg *strings.Reader
			if c.cfg != "" {
				cfg = strings.NewReader(c.cfg)
			}
			var err error
			if cfg != nil {
				_, err = ReadHFTokenizer(bytes.NewReader(tinyHFJSON(t, c.edit)), cfg, true)
			} else {
				_, err = ReadHFTokenizer(bytes.NewReader(tinyHFJSON(t, c.edit)), nil, true)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestLoadHFTokenizerErrors(t *testing.T) {
	if _, err := NewTokenizer(TokenizerConfig{Type: "HuggingFaceTokenizer"}); err == nil || !strings.Contains(err.Error(), "--tokenizer-model") {
		t.Errorf("no directory: %v", err)
	}
	dir := t.TempDir()
	if _, err := LoadHFTokenizer(dir, true); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("empty directory: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(`{"model": `), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadHFTokenizer(dir, true); err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "tokenizer.json: unexpected EOF") {
		t.Errorf("truncated file: %v", err)
	}
}

// FuzzReadHFTokenizer checks that no tokenizer.json makes the reader, Encode or Decode
// panic.
func FuzzReadHFTokenizer(f *testing.F) {
	f.Add(tinyHFJSON(f, nil), "abab<s>ba c")
	f.Add(tinyHFJSON(f, func(m map[string]any) {
		m["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "Prepend", "prepend": "a"}, map[string]any{"type": "NFKC"}}}
		m["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "b", "prepend_scheme": "first"}
		m["post_processor"] = map[string]any{"type": "TemplateProcessing", "single": []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>"}}, map[string]any{"Sequence": map[string]any{"id": "A"}}},
			"special_tokens": map[string]any{"<s>": map[string]any{"ids": []any{4}}}}
		m["decoder"] = map[string]any{"type": "Metaspace", "replacement": "b"}
	}), "a b\xffab")
	f.Add(tinyHFJSON(f, func(m map[string]any) {
		m["model"].(map[string]any)["type"] = "WordPiece"
		m["model"].(map[string]any)["vocab"].(map[string]any)["##b"] = 5
		m["normalizer"] = map[string]any{"type": "BertNormalizer", "strip_accents": false}
		m["pre_tokenizer"] = map[string]any{"type": "BertPreTokenizer"}
		m["decoder"] = map[string]any{"type": "WordPiece", "prefix": "##"}
	}), "Ab ab, 中a\x00\u0085 ab's")
	f.Add([]byte(`{"model":{"vocab":{"a":0},"merges":[["a","a"]]},"added_tokens":[{"id":0,"content":"a","lstrip":true,"rstrip":true}]}`), " a a ")
	f.Fuzz(func(t *testing.T, tj []byte, text string) {
		tok, err := ReadHFTokenizer(bytes.NewReader(tj), nil, true)
		if err != nil {
			return
		}
		encodeInRange(t, tok, text)
	})
}

// encodeInRange encodes text, fails unless every id is in [0, VocabSize), decodes the ids
// and returns them.
func encodeInRange(t *testing.T, tok Tokenizer, text string) []int32 {
	t.Helper()
	ids := tok.Encode(text)
	for _, id := range ids {
		if id < 0 || int(id) >= tok.VocabSize() {
			t.Fatalf("Encode(%q) gave id %d outside [0, %d)", text, id, tok.VocabSize())
		}
	}
	tok.Decode(ids)
	return ids
}
