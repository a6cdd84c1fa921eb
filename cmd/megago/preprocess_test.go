package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The golden files are written by data/testdata/indexed/gen_golden.py.
const (
	preprocessTestdata = "../../data/testdata/preprocess"
	indexedTestdata    = "../../data/testdata/indexed"
)

// TestPreprocessCommandGolden runs megago preprocess with the NullTokenizer and -append-eod
// on the committed JSONL file and compares the bytes with the Python script's, which
// names the outputs as Megatron's tools/preprocess_data.py does: PREFIX_KEY_document.
// The keys are given as a comma-separated value and as Megatron's list.
func TestPreprocessCommandGolden(t *testing.T) {
	for _, keys := range [][]string{{"-json-keys", "text,title"}, {"--json-keys", "text", "title"}} {
		t.Run(strings.Join(keys, " "), func(t *testing.T) { testPreprocessGolden(t, keys) })
	}
}

func testPreprocessGolden(t *testing.T, keys []string) {
	dir := t.TempDir()
	args := append([]string{"preprocess", "-input", filepath.Join(preprocessTestdata, "input.jsonl"),
		"-output-prefix", filepath.Join(dir, "u16_eod")}, keys...)
	stdout, stderr, err := run(t, append(args, "-append-eod", "-tokenizer-type", "NullTokenizer", "-vocab-size", "1000", "-workers", "2")...)
	if err != nil {
		t.Fatalf("megago preprocess: %v\n%s", err, stderr)
	}
	for _, key := range []string{"text", "title"} {
		name := "u16_eod_" + key + "_document"
		for _, ext := range []string{".bin", ".idx"} {
			got, err := os.ReadFile(filepath.Join(dir, name+ext))
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join(preprocessTestdata, "expected", name+ext))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s%s:\n got % x\nwant % x", name, ext, got, want)
			}
		}
		if !strings.Contains(stdout, name) {
			t.Errorf("summary does not name %s:\n%s", name, stdout)
		}
	}
	for _, want := range []string{"9 lines", "9 documents", "0 bad lines", "uint16", "empty documents"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary does not say %q:\n%s", want, stdout)
		}
	}
	if stderr != "" {
		t.Errorf("stderr is not a terminal, yet something was written to it: %q", stderr)
	}
}

func TestPreprocessCommandBadLines(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(input, []byte("{\"text\": \"1 2\"}\nnot json\n{\"other\": 1}\n{\"text\": \"3\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"preprocess", "-input", input, "-output-prefix", filepath.Join(dir, "out"), "-tokenizer-type", "NullTokenizer", "-vocab-size", "10"}
	stdout, stderr, err := run(t, args...)
	if err != nil {
		t.Fatalf("megago preprocess: %v", err)
	}
	for _, want := range []string{input + ":2: invalid JSON", input + `:3: missing key "text"`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not report %q:\n%s", want, stderr)
		}
	}
	if !strings.Contains(stdout, "2 bad lines skipped") {
		t.Errorf("summary does not count the bad lines:\n%s", stdout)
	}

	strictDir := t.TempDir()
	args[4] = filepath.Join(strictDir, "out")
	_, _, err = run(t, append(args, "-strict")...)
	if err == nil || !strings.Contains(err.Error(), input+":2:") {
		t.Errorf("megago preprocess -strict: err = %v, want one naming line 2", err)
	}
	if code := exitCode(err); code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	if ents, _ := os.ReadDir(strictDir); len(ents) != 0 {
		t.Errorf("a failed run left %v behind", ents)
	}
}

func TestPreprocessCommandUsage(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		mention string
	}{
		{"no input", []string{"-output-prefix", "x", "-tokenizer-type", "NullTokenizer"}, "-input"},
		{"no tokenizer", []string{"-input", "x", "-output-prefix", "y"}, "-tokenizer-type"},
		{"bad dtype", []string{"-input", "x", "-output-prefix", "y", "-tokenizer-type", "NullTokenizer", "-dtype", "uint3"}, "uint3"},
		{"bad workers", []string{"-input", "x", "-output-prefix", "y", "-tokenizer-type", "NullTokenizer", "-workers", "0"}, "-workers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := run(t, append([]string{"preprocess"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.mention) || exitCode(err) != 2 {
				t.Errorf("err = %v (exit %d), want a usage error mentioning %q", err, exitCode(err), tt.mention)
			}
		})
	}
}

func TestInspect(t *testing.T) {
	stdout, _, err := run(t, "inspect", "-samples", "2", filepath.Join(indexedTestdata, "uint16_docs"))
	if err != nil {
		t.Fatalf("megago inspect: %v", err)
	}
	// uint16_docs holds documents [[1 2 3] [4]], [], [[5 6]], [], [[7] [8 9 10] [11]].
	for _, want := range []string{
		"dtype uint16 (code 8, 2 bytes)",
		"sequences  6\n",
		"documents  5 (2 empty)\n",
		"tokens     11\n",
		"length     min 1, max 3, mean 1.83\n",
		"ids        min 1, max 11\n",
		"sample 0   document 0, 3 tokens: 1 2 3\n",
		"sample 1   document 0, 1 tokens: 4\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("megago inspect output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "sample 2") {
		t.Errorf("-samples 2 printed a third sample:\n%s", stdout)
	}
}

func TestInspectDecodes(t *testing.T) {
	stdout, _, err := run(t, "inspect", "-mode", "lazy", "-samples", "4", "-tokenizer-type", "NullTokenizer", "-vocab-size", "20",
		filepath.Join(indexedTestdata, "uint16_docs")+".idx")
	if err != nil {
		t.Fatalf("megago inspect: %v", err)
	}
	if want := "sample 3   document 4, 1 tokens: \"7\"\n"; !strings.Contains(stdout, want) {
		t.Errorf("output lacks %q:\n%s", want, stdout)
	}
}

func TestInspectCorrupt(t *testing.T) {
	prefix := filepath.Join(indexedTestdata, "corrupt", "documents_not_monotonic")
	_, _, err := run(t, "inspect", prefix)
	if err == nil {
		t.Fatal("megago inspect of a corrupt dataset succeeded")
	}
	for _, want := range []string{prefix + ".idx", "document_indices[2]", "byte offset 98"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// An input whose every line is bad makes preprocess fail (a non-zero exit), giving the
// count and the first bad line.
func TestPreprocessCommandAllLinesBad(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(input, []byte("not json\n{\"other\": 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := run(t, "preprocess", "-input", input, "-output-prefix", filepath.Join(dir, "out"), "-tokenizer-type", "NullTokenizer", "-vocab-size", "10")
	want := "preprocess: data: preprocess: all 2 lines of " + input + " are bad, nothing written; the first: data: " + input + ":1: invalid JSON"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("megago preprocess: %v\nwant %s...", err, want)
	}
}

// TestPreprocessCommandHuggingFace tokenizes with a tokenizer.json directory, with and
// without the post-processor's BOS; the ids of "Hello world" are @huggingface/tokenizers'
// (data/testdata/hf/golden.json), then the EOD (</s>, 2).
func TestPreprocessCommandHuggingFace(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(input, []byte("{\"text\": \"Hello world\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		flags []string
		want  []uint16
	}{
		{nil, []uint16{1, 22557, 1526, 2}},
		{[]string{"-tokenizer-hf-no-include-special-tokens"}, []uint16{22557, 1526, 2}},
	} {
		prefix := filepath.Join(dir, "out")
		args := append([]string{"preprocess", "-input", input, "-output-prefix", prefix, "-append-eod",
			"-tokenizer-type", "HuggingFaceTokenizer", "-tokenizer-model", "../../data/testdata/hf/llama2"}, c.flags...)
		if _, stderr, err := run(t, args...); err != nil {
			t.Fatalf("megago %v: %v\n%s", args, err, stderr)
		}
		got := readUint16Tokens(t, prefix+"_text_document.bin")
		if !slices.Equal(got, c.want) {
			t.Errorf("%v: tokens %v, want %v", c.flags, got, c.want)
		}
	}
}

// TestPreprocessCommandTikToken tokenizes with Megatron's TikTokenizer flags; the ids
// are npm tiktoken's (data/testdata/tiktoken/golden.json), then the EOD (</s>, 2).
func TestPreprocessCommandTikToken(t *testing.T) {
	b, err := os.ReadFile("../../data/testdata/tiktoken/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Cases []struct {
			Name, Text string
			IDs        []uint16
		}
	}
	if err := json.Unmarshal(b, &golden); err != nil {
		t.Fatal(err)
	}
	goldenIDs := func(name, text string) []uint16 {
		for _, c := range golden.Cases {
			if c.Name == name && c.Text == text {
				return c.IDs
			}
		}
		t.Fatalf("golden.json has no case %s %q", name, text)
		return nil
	}
	dir := t.TempDir()
	for _, c := range []struct {
		golden, text string
		flags        []string
	}{
		{"full-v1", "Hello, world! How are you?", []string{"-tiktoken-pattern", "v1", "-vocab-size", "9000"}},
		{"cut-v2", "<s> and </s> and <unk>", []string{"-vocab-size", "4000"}},
		{"custom-special-v1", "x<|im_start|>user\nhi<|im_end|>", []string{"-tiktoken-pattern", "v1", "-vocab-size", "5016",
			"-tiktoken-num-special-tokens", "16", "-tokenizer-special-tokens", "<unk> <s> </s> <mask> <pad> <cls> <sep>",
			"-tiktoken-special-tokens", "<|im_start|> <|im_end|>"}},
	} {
		input := filepath.Join(dir, "in.jsonl")
		line, _ := json.Marshal(map[string]string{"text": c.text})
		if err := os.WriteFile(input, append(line, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		prefix := filepath.Join(dir, "out")
		args := append([]string{"preprocess", "-input", input, "-output-prefix", prefix, "-append-eod",
			"-tokenizer-type", "TikTokenizer", "-tokenizer-model", "../../data/testdata/tiktoken/o200k_8000.json.gz"}, c.flags...)
		if _, stderr, err := run(t, args...); err != nil {
			t.Fatalf("megago %v: %v\n%s", args, err, stderr)
		}
		got := readUint16Tokens(t, prefix+"_text_document.bin")
		if want := append(goldenIDs(c.golden, c.text), 2); !slices.Equal(got, want) {
			t.Errorf("%s %q: tokens %v, want %v", c.golden, c.text, got, want)
		}
	}
}

// readUint16Tokens returns the tokens of a uint16 indexed dataset's .bin file.
func readUint16Tokens(t *testing.T, bin string) []uint16 {
	t.Helper()
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]uint16, len(b)/2)
	for i := range got {
		got[i] = uint16(b[2*i]) | uint16(b[2*i+1])<<8
	}
	return got
}

// TestPreprocessCommandSentencePieceBPE tokenizes with a SentencePiece BPE .model as
// Llama2Tokenizer, as current Megatron does (no BOS) and with -legacy-tokenizer (BOS, as
// Megatron's legacy _Llama2Tokenizer); the ids of "Hello world" are python3-sentencepiece's
// (data/testdata/spbpe/golden.json), then the EOD (</s>, 2).
func TestPreprocessCommandSentencePieceBPE(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(input, []byte("{\"text\": \"Hello world\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hello := []uint16{504, 592, 279, 499, 418, 496}
	const bos, eod = 1, 2
	for _, c := range []struct {
		typ   string
		flags []string
		want  []uint16
	}{
		{"Llama2Tokenizer", nil, append(slices.Clone(hello), eod)},
		{"Llama2Tokenizer", []string{"-legacy-tokenizer"}, append(append([]uint16{bos}, hello...), eod)},
		{"GPTSentencePieceTokenizer", nil, append(slices.Clone(hello), eod)},
	} {
		prefix := filepath.Join(dir, "out")
		args := append([]string{"preprocess", "-input", input, "-output-prefix", prefix, "-append-eod",
			"-tokenizer-type", c.typ, "-tokenizer-model", "../../data/testdata/spbpe/llama.model"}, c.flags...)
		if _, stderr, err := run(t, args...); err != nil {
			t.Fatalf("megago %v: %v\n%s", args, err, stderr)
		}
		got := readUint16Tokens(t, prefix+"_text_document.bin")
		if !slices.Equal(got, c.want) {
			t.Errorf("%s %v: tokens %v, want %v", c.typ, c.flags, got, c.want)
		}
	}
}
