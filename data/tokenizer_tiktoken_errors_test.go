package data

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tinyTikEntries returns the entries of a small vocabulary: the 256 bytes, then "ab",
// "abc", " a".
func tinyTikEntries() []map[string]any {
	var e []map[string]any
	add := func(tok string) {
		e = append(e, map[string]any{"rank": len(e), "token_bytes": base64.StdEncoding.EncodeToString([]byte(tok)), "token_str": tok})
	}
	for b := range 256 {
		add(string([]byte{byte(b)}))
	}
	for _, tok := range []string{"ab", "abc", " a"} {
		add(tok)
	}
	return e
}

func tinyTikJSON(t testing.TB, edit func(e []map[string]any) []map[string]any) []byte {
	t.Helper()
	e := tinyTikEntries()
	if edit != nil {
		e = edit(e)
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tinyTikConfig numbers the tiny vocabulary's 259 ranks after 8 special tokens.
var tinyTikConfig = TikTokenConfig{Pattern: "v1", NumSpecialTokens: 8, VocabSize: 8 + 259}

func TestTikTokenizerTiny(t *testing.T) {
	tok, err := ReadTikTokenizer(bytes.NewReader(tinyTikJSON(t, nil)), tinyTikConfig)
	if err != nil {
		t.Fatal(err)
	}
	// "abcab a<s>x": words "abcab", " a", then <s>, "x"; ab merges first (rank 256), then
	// ab+c (rank 257); the 8 special tokens shift every rank by 8.
	ab, abc, spA, x := int32(8+256), int32(8+257), int32(8+258), int32(8+'x')
	if got, want := tok.Encode("abcab a<s>x"), []int32{abc, ab, spA, 1, x}; !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	want := SpecialIDs{BOS: 1, EOS: 2, EOD: 2, Mask: 3, Pad: 4, CLS: 5, SEP: 6}
	if s := tok.Special(); s.BOS != want.BOS || s.EOS != want.EOS || s.EOD != want.EOD || s.Mask != want.Mask ||
		s.Pad != want.Pad || s.CLS != want.CLS || s.SEP != want.SEP || len(s.Sentinels) != 0 {
		t.Errorf("Special = %+v, want %+v", s, want)
	}
	if tok.VocabSize() != 267 || tok.NumSpecialTokens() != 8 {
		t.Errorf("VocabSize %d, NumSpecialTokens %d; want 267, 8", tok.VocabSize(), tok.NumSpecialTokens())
	}
	for _, c := range []struct {
		tok string
		id  int32
	}{{"<unk>", 0}, {"<sep>", 6}, {"<SPECIAL_7>", 7}, {"abc", abc}, {"\x00", 8}} {
		if id, ok := tok.TokenID(c.tok); !ok || id != c.id {
			t.Errorf("TokenID(%q) = %d, %v; want %d", c.tok, id, ok, c.id)
		}
		if got := tok.Decode([]int32{c.id}); got != c.tok {
			t.Errorf("Decode(%d) = %q, want %q", c.id, got, c.tok)
		}
	}
}

func TestTikTokenizerVocabSize(t *testing.T) {
	// --vocab-size 8+257 keeps ranks 0..256: "abc" is ab c.
	c := tinyTikConfig
	c.VocabSize = 8 + 257
	tok, err := ReadTikTokenizer(bytes.NewReader(tinyTikJSON(t, nil)), c)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tok.Encode("abc"), []int32{8 + 256, 8 + 'c'}; !slices.Equal(got, want) || tok.VocabSize() != 265 {
		t.Errorf("Encode(abc) = %v, want %v; VocabSize %d, want 265", got, want, tok.VocabSize())
	}
	// The golden vocabulary cut by Megatron's default --vocab-size: too few entries.
	_, err = LoadTikTokenizer(filepath.Join(tikGoldenDir, "o200k_8000.json.gz"), TikTokenConfig{})
	if err == nil || !strings.Contains(err.Error(), "8000 entries: --vocab-size 131072 with 1000 special tokens needs 130072") {
		t.Errorf("default --vocab-size on 8000 entries: err = %v", err)
	}
}

func TestTikTokenizerConfigErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  TikTokenConfig
		want string
	}{
		{"pattern", TikTokenConfig{Pattern: "v3", NumSpecialTokens: 8, VocabSize: 267}, `pattern "v3": want v1 or v2`},
		{"few special", TikTokenConfig{NumSpecialTokens: 6, VocabSize: 267}, "--tiktoken-num-special-tokens 6: want at least the 7"},
		{"special ≥ vocab", TikTokenConfig{NumSpecialTokens: 267, VocabSize: 267}, "less than --vocab-size 267"},
		{"vocab size", TikTokenConfig{VocabSize: -1}, "--vocab-size -1 outside"},
		{"no pad", TikTokenConfig{NumSpecialTokens: 8, VocabSize: 267, SpecialTokens: []string{"<unk>", "<s>", "</s>", "<mask>", "<cls>", "<sep>", "<x>"}}, "lack <pad>"},
		{"twice", TikTokenConfig{NumSpecialTokens: 9, VocabSize: 267, SpecialTokens: append(DefaultTikTokenSpecial(), "<x>", "<x>")}, `"<x>" is empty or given twice`},
		{"filler", TikTokenConfig{NumSpecialTokens: 9, VocabSize: 267, SpecialTokens: append(DefaultTikTokenSpecial(), "<SPECIAL_8>")}, "<SPECIAL_8> is also the filler of id 8"},
	} {
		_, err := ReadTikTokenizer(bytes.NewReader(tinyTikJSON(t, nil)), c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to contain %q", c.name, err, c.want)
		}
	}
}

// TestTikTokenizerFileErrors checks that bad vocabulary files give errors naming the
// file and the entry.
func TestTikTokenizerFileErrors(t *testing.T) {
	set := func(i int, k string, v any) func([]map[string]any) []map[string]any {
		return func(e []map[string]any) []map[string]any {
			if v == nil {
				delete(e[i], k)
			} else {
				e[i][k] = v
			}
			return e
		}
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		file []byte
		want string
	}{
		{"not JSON", []byte("rank token_bytes\n"), "not a JSON list"},
		{"object", []byte(`{"rank": 0}`), "not a JSON list"},
		{"entry not object", []byte(`[{"rank": 0, "token_bytes": "AA==", "token_str": ""}, 7]`), "entry 1: json: cannot unmarshal number"},
		{"truncated", tinyTikJSON(t, nil)[:3000], "entry "},
		{"trailing", append(tinyTikJSON(t, nil), " []"...), "data after the list"},
		{"missing rank", tinyTikJSON(t, set(258, "rank", nil)), `entry 258: no "rank" field`},
		{"missing token_str", tinyTikJSON(t, set(3, "token_str", nil)), `entry 3: no "token_str" field`},
		{"extra field", tinyTikJSON(t, set(5, "score", 1.5)), `entry 5: field "score"`},
		{"rank not int", tinyTikJSON(t, set(257, "rank", "x")), `entry 257: rank "x" is not an integer`},
		{"bad base64", tinyTikJSON(t, set(256, "token_bytes", "YW=!")), `entry 256: token_bytes "YW=!" is not base64`},
		{"repeated rank", tinyTikJSON(t, set(257, "rank", 256)), "entry 257: rank 256: ranks must be 0, 1, 2"},
		{"rank gap", tinyTikJSON(t, func(e []map[string]any) []map[string]any { return append(e[:100], e[101:]...) }), "entry 100: rank 101"},
		{"byte order", tinyTikJSON(t, set(65, "token_bytes", "Qg==")), `entry 65: token_bytes "B": rank 65 must be the single byte 0x41`},
		{"repeated bytes", tinyTikJSON(t, set(257, "token_bytes", "YWI=")), `entry 257: token_bytes "ab" repeat entry 256`},
		{"too few", tinyTikJSON(t, func(e []map[string]any) []map[string]any { return e[:258] }), "258 entries: --vocab-size 267 with 8 special tokens needs 259"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".json")
		if err := os.WriteFile(path, c.file, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadTikTokenizer(path, tinyTikConfig)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: err = %v, want it to name %s and contain %q", c.name, err, path, c.want)
		}
	}
	if _, err := LoadTikTokenizer(filepath.Join(dir, "none.json"), tinyTikConfig); err == nil || !strings.Contains(err.Error(), "none.json") {
		t.Errorf("missing file: err = %v", err)
	}
	if _, err := NewTokenizer(TokenizerConfig{Type: "TikTokenizer"}); err == nil || !strings.Contains(err.Error(), "--tokenizer-model") {
		t.Errorf("no --tokenizer-model: err = %v", err)
	}
}

func FuzzReadTikTokenizer(f *testing.F) {
	f.Add(tinyTikJSON(f, nil), "abcab a<s>x\xff")
	f.Add([]byte(`[{"rank": 0, "token_bytes": "AA==", "token_str": null}]`), "")
	f.Add(tinyTikJSON(f, func(e []map[string]any) []map[string]any { return e[:257] }), "ab")
	f.Fuzz(func(t *testing.T, file []byte, text string) {
		tok, err := ReadTikTokenizer(bytes.NewReader(file), tinyTikConfig)
		if err != nil {
			return
		}
		if got := tok.Decode(encodeInRange(t, tok, text)); got != text {
			t.Errorf("Decode(Encode(%q)) = %q", text, got)
		}
	})
}
