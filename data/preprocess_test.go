package data

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The expected outputs in testdata/preprocess/expected are written by
// testdata/indexed/gen_golden.py from cases.json, following tools/preprocess_data.py.
const preprocessTestdata = "testdata/preprocess"

type preprocessCase struct {
	Name      string   `json:"name"`
	Input     string   `json:"input"`
	JSONKeys  []string `json:"json_keys"`
	VocabSize int      `json:"vocab_size"`
	AppendEOD bool     `json:"append_eod"`
}

func loadPreprocessCases(t *testing.T) []preprocessCase {
	t.Helper()
	var cases []preprocessCase
	readIndexedJSON(t, filepath.Join(preprocessTestdata, "cases.json"), &cases)
	return cases
}

func newTestNullTokenizer(t testing.TB, vocab int) *NullTokenizer {
	t.Helper()
	tok, err := NewNullTokenizer(vocab)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestPreprocessGolden runs each case of cases.json with several worker counts and batch
// sizes (so that batches complete out of order) and compares the bytes with the Python
// script's.
func TestPreprocessGolden(t *testing.T) {
	for _, c := range loadPreprocessCases(t) {
		for _, workers := range []int{1, 2, 4} {
			t.Run(fmt.Sprintf("%s/workers=%d", c.Name, workers), func(t *testing.T) {
				cfg := PreprocessConfig{
					Input:        filepath.Join(preprocessTestdata, c.Input),
					OutputPrefix: filepath.Join(t.TempDir(), c.Name),
					JSONKeys:     c.JSONKeys,
					AppendEOD:    c.AppendEOD,
					Workers:      workers,
					BatchLines:   workers, // several batches in flight
					OnBadLine:    func(e *LineError) { t.Errorf("bad line: %v", e) },
				}
				sum, err := Preprocess(context.Background(), cfg, newTestNullTokenizer(t, c.VocabSize))
				if err != nil {
					t.Fatal(err)
				}
				for k, key := range c.JSONKeys {
					name := c.Name + "_" + key + "_document"
					if sum.Outputs[k].Prefix != filepath.Join(filepath.Dir(cfg.OutputPrefix), name) {
						t.Errorf("output %d at %s, want %s", k, sum.Outputs[k].Prefix, name)
					}
					sameIndexedFiles(t, sum.Outputs[k].Prefix, filepath.Join(preprocessTestdata, "expected", name))
				}
				lines := countInputLines(t, cfg.Input)
				if sum.Lines != lines || sum.Documents != lines || sum.BadLines != 0 {
					t.Errorf("summary: %d lines, %d documents, %d bad; want %d, %d, 0", sum.Lines, sum.Documents, sum.BadLines, lines, lines)
				}
			})
		}
	}
}

func countInputLines(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return int64(strings.Count(string(b), "\n"))
}

// badLines are inserted into the golden input; each must be reported and skipped.
var badLines = []struct{ line, mention string }{
	{`{"text": "1 2", "title": `, "invalid JSON"},
	{`not json`, "invalid JSON"},
	{``, "empty line"},
	{`["1", "2"]`, "not an object"},
	{`{"title": "1"}`, `missing key "text"`},
	{`{"text": 5, "title": "1"}`, `key "text" is a number`},
	{`{"text": null, "title": "1"}`, `key "text" is null`},
	{`{"text": "1", "title": ["2", 3]}`, `key "title": a list whose elements are not all strings`},
	{`{"text": "1 x 2", "title": "1"}`, `key "text"`},            // NullTokenizer rejects "x"
	{`{"text": "1", "title": "1  2"}`, `key "title"`},            // two spaces: an empty field
	{`{"text": "1", "title": "1000"}`, `not an id in [0, 1000)`}, // outside the vocabulary
}

// badInput writes the golden input with badLines interleaved and returns its path and the
// line numbers of the bad lines.
func badInput(t *testing.T) (string, []int64) {
	t.Helper()
	good, err := os.ReadFile(filepath.Join(preprocessTestdata, "input.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var bad []int64
	goodLines := strings.Split(strings.TrimSuffix(string(good), "\n"), "\n")
	for i, line := range goodLines {
		if i < len(badLines) {
			out = append(out, badLines[i].line)
			bad = append(bad, int64(len(out)))
		}
		out = append(out, line)
	}
	for _, b := range badLines[min(len(badLines), len(goodLines)):] {
		out = append(out, b.line)
		bad = append(bad, int64(len(out)))
	}
	path := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(out, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, bad
}

func TestPreprocessSkipsBadLines(t *testing.T) {
	input, wantBad := badInput(t)
	var got []*LineError
	cfg := PreprocessConfig{
		Input: input, OutputPrefix: filepath.Join(t.TempDir(), "u16_eod"), JSONKeys: []string{"text", "title"},
		AppendEOD: true, Workers: 2, BatchLines: 3,
		OnBadLine: func(e *LineError) { got = append(got, e) },
	}
	sum, err := Preprocess(context.Background(), cfg, newTestNullTokenizer(t, 1000))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(badLines) || sum.BadLines != int64(len(badLines)) {
		t.Fatalf("%d bad lines reported, summary %d; want %d", len(got), sum.BadLines, len(badLines))
	}
	for i, e := range got {
		if e.Line != wantBad[i] || e.File != input || !strings.Contains(e.Error(), badLines[i].mention) {
			t.Errorf("bad line %d: %v; want line %d mentioning %q", i, e, wantBad[i], badLines[i].mention)
		}
		if !strings.Contains(e.Error(), fmt.Sprintf("%s:%d:", input, wantBad[i])) {
			t.Errorf("error %q does not name %s:%d", e, input, wantBad[i])
		}
	}
	// Skipping the bad lines leaves exactly the golden output.
	for k, key := range cfg.JSONKeys {
		sameIndexedFiles(t, sum.Outputs[k].Prefix, filepath.Join(preprocessTestdata, "expected", "u16_eod_"+key+"_document"))
	}
}

func TestPreprocessStrict(t *testing.T) {
	input, wantBad := badInput(t)
	dir := t.TempDir()
	cfg := PreprocessConfig{Input: input, OutputPrefix: filepath.Join(dir, "out"), JSONKeys: []string{"text", "title"}, Strict: true, Workers: 2, BatchLines: 1}
	_, err := Preprocess(context.Background(), cfg, newTestNullTokenizer(t, 1000))
	var le *LineError
	if !errors.As(err, &le) || le.Line != wantBad[0] {
		t.Fatalf("err = %v, want a *LineError for line %d", err, wantBad[0])
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a failed run left %v in the output directory", ents)
	}
}

func TestPreprocessCancelled(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cfg := PreprocessConfig{Input: filepath.Join(preprocessTestdata, "input.jsonl"), OutputPrefix: filepath.Join(dir, "out"), BatchLines: 1}
	if _, err := Preprocess(ctx, cfg, newTestNullTokenizer(t, 1000)); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a cancelled run left %v in the output directory", ents)
	}
}

func TestPreprocessConfigErrors(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(preprocessTestdata, "input.jsonl")
	tests := []struct {
		name    string
		cfg     PreprocessConfig
		mention string
	}{
		{"no input", PreprocessConfig{OutputPrefix: dir + "/x"}, "no input"},
		{"no output", PreprocessConfig{Input: input}, "no output prefix"},
		{"repeated key", PreprocessConfig{Input: input, OutputPrefix: dir + "/x", JSONKeys: []string{"text", "text"}}, "repeated"},
		{"missing input", PreprocessConfig{Input: dir + "/missing.jsonl", OutputPrefix: dir + "/x"}, "missing.jsonl"},
		{"ids too large for dtype", PreprocessConfig{Input: input, OutputPrefix: dir + "/x", DType: Uint8}, "does not fit dtype uint8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Preprocess(context.Background(), tt.cfg, newTestNullTokenizer(t, 1000))
			if err == nil || !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("err = %v, want one mentioning %q", err, tt.mention)
			}
		})
	}
}

// wordLenTokenizer maps each space-separated word to its length in bytes; EOD is 0.
type wordLenTokenizer struct{}

func (wordLenTokenizer) Encode(text string) []int32 {
	var ids []int32
	for _, w := range strings.Fields(text) {
		ids = append(ids, int32(len(w)))
	}
	return ids
}
func (wordLenTokenizer) Decode(ids []int32) string { return fmt.Sprint(ids) }
func (wordLenTokenizer) VocabSize() int            { return 100 }
func (wordLenTokenizer) Special() SpecialIDs {
	s := NoSpecial()
	s.EOD = 0
	return s
}

func TestPreprocessSplitSentences(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	lines := `{"text": "Hello Mr. Smith.  How are you? I am fine."}
{"text": ["Already split. Not split again.", "", "Second."]}
{"text": "   "}
`
	if err := os.WriteFile(input, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := PreprocessConfig{Input: input, OutputPrefix: filepath.Join(dir, "out"), SplitSentences: true, AppendEOD: true, Workers: 2}
	sum, err := Preprocess(context.Background(), cfg, wordLenTokenizer{})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "out_text_sentence"); sum.Outputs[0].Prefix != want {
		t.Fatalf("output %s, want %s", sum.Outputs[0].Prefix, want)
	}
	ds, err := OpenIndexed(sum.Outputs[0].Prefix, ReadMmap)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	// Punkt keeps "Mr." inside the first sentence; EOD (0) ends each non-empty document.
	want := MemorySource{
		Seqs: [][]int32{{5, 3, 6}, {3, 3, 4}, {1, 2, 5, 0}, {7, 6, 3, 5, 6}, {7, 0}},
		Docs: []int{0, 3, 5, 5},
	}
	if got := copySource(ds); !slices.EqualFunc(got.Seqs, want.Seqs, slices.Equal) || !slices.Equal(got.Docs, want.Docs) {
		t.Errorf("got sequences %v documents %v, want %v %v", got.Seqs, got.Docs, want.Seqs, want.Docs)
	}
	if sum.Outputs[0].EmptyDocuments != 1 || sum.Outputs[0].Sequences != 5 || sum.Outputs[0].Tokens != 17 {
		t.Errorf("summary %+v", sum.Outputs[0])
	}
}

// copySource copies a TokenSource into memory.
func copySource(src TokenSource) MemorySource {
	var m MemorySource
	for i := range src.NumSequences() {
		m.Seqs = append(m.Seqs, src.AppendTokens([]int32{}, i, 0, src.SequenceLen(i)))
	}
	m.Docs = []int{0}
	for j := range src.NumDocuments() {
		_, end := src.Document(j)
		m.Docs = append(m.Docs, end)
	}
	return m
}
