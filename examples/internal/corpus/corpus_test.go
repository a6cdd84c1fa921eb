package corpus

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/data"
	"megago/examples/internal/settings"
)

func TestLines(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"empty", "", nil},
		{"no final newline", "a\nb", []string{"a\n", "b"}},
		{"blank lines go with the line before", "package p\n\n\nfunc f() {\n\t\n}\n", []string{"package p\n\n\n", "func f() {\n\t\n", "}\n"}},
		{"leading blank line", "\nx\n", []string{"\n", "x\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Lines(tc.text)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.text, strings.Join(got, ""), "the sentences concatenate to the text")
		})
	}
}

func TestDeclarations(t *testing.T) {
	text := "// Copyright\n\npackage p\n\nimport (\n\t\"io\"\n\n\t\"os\"\n)\n\n// F does.\nfunc F() {\n\tx := 1\n\n\t_ = x\n}\n\nvar v = 1\n"
	want := []string{"// Copyright\n\n", "package p\n\n", "import (\n\t\"io\"\n\n\t\"os\"\n)\n\n",
		"// F does.\nfunc F() {\n\tx := 1\n\n\t_ = x\n}\n\n", "var v = 1\n"}
	assert.Equal(t, want, Declarations(text))
	assert.Equal(t, []string{"func f() {\n\n}\n"}, Declarations("func f() {\n\n}\n"), "a closing brace does not start a paragraph")
	assert.Nil(t, Declarations(""))
}

// TestSources: --data-path's datasets, weights and all, said as given; ids past the
// vocabulary refused.
func TestSources(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "d")
	b, err := data.NewIndexedBuilder(prefix, data.Int32)
	require.NoError(t, err)
	require.NoError(t, b.AddDocument([]int32{1, 2, 9}, []int{3}))
	require.NoError(t, b.Finalize())
	c := &settings.Common{CacheDir: t.TempDir(), TokenizerType: "tiny", DataPath: []string{"0.5", prefix}}
	sources, about, files, err := Sources(context.Background(), c, Spec{}, 10, true, io.Discard)
	require.NoError(t, err)
	defer sources[0].Close()
	assert.Equal(t, "--data-path 0.5 "+prefix, about)
	assert.Nil(t, files)
	assert.Equal(t, 3, sources[0].SequenceLen(0))
	_, _, _, err = Sources(context.Background(), c, Spec{}, 9, true, io.Discard)
	assert.ErrorContains(t, err, "holds token id 9, but the tiny tokenizer has 9 ids")
}

// TestUnigram: the entropy of counts {a: 2, b: 1, c: 1} is 1.5·ln 2 nats.
func TestUnigram(t *testing.T) {
	src := &data.MemorySource{Seqs: [][]int32{{7, 3}, {7, 5}}}
	var u Unigram
	require.NoError(t, u.Add(src, 0, 2))
	assert.Equal(t, int64(4), u.Total)
	assert.InDelta(t, 1.5*math.Ln2, u.Entropy(), 1e-12)
	assert.Equal(t, int32(7), u.MostFrequent())
	assert.Equal(t, int32(-1), (&Unigram{}).MostFrequent())
}

// TestBuildSentences: a corpus of two files, one document each and one sequence per
// line, whose tokens decode back to the files.
func TestBuildSentences(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{"a/a.go": "package a\n\nfunc A() {}\n", "b/b.go": "package b\nvar x = 1\n"}
	var names []string
	for name, text := range files {
		require.NoError(t, os.MkdirAll(filepath.Join(root, "src", filepath.Dir(name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, "src", name), []byte(text), 0o644))
		names = append(names, name)
	}
	tok := data.GoSourceBPE()
	prefix := filepath.Join(t.TempDir(), "c")
	require.NoError(t, buildSentences(context.Background(), prefix, root, names, Spec{Tokenizer: tok, Sentences: Lines}, io.Discard))
	docs, err := os.ReadFile(prefix + documentsSuffix)
	require.NoError(t, err)
	assert.Equal(t, strings.Join(names, "\n")+"\n", string(docs), "the file of each document")
	ds, err := Open([]string{prefix}, tok.VocabSize(), "gosource-bpe")
	require.NoError(t, err)
	defer ds[0].Close()
	require.Equal(t, 2, ds[0].NumDocuments())
	for d, name := range names {
		lo, hi := ds[0].Document(d)
		assert.Equal(t, len(Lines(files[name])), hi-lo, name)
		var text string
		for k := lo; k < hi; k++ {
			text += tok.Decode(ds[0].AppendTokens(nil, k, 0, ds[0].SequenceLen(k)))
		}
		assert.Equal(t, files[name], text)
	}
	_, err = Open([]string{prefix}, 10, "tiny")
	assert.ErrorContains(t, err, "the tiny tokenizer has 10 ids")
}

// TestGoSourceKeyTokenizerArgs: the default corpus's cache key changes with the
// tokenizer flags beyond the type and vocabulary files (a different --tokenizer-model
// gives different ids), and is the same on every call.
func TestGoSourceKeyTokenizerArgs(t *testing.T) {
	root := t.TempDir()
	const files = 16 // a quarter of the files is sampled
	for i := range files {
		dir := filepath.Join(root, "src", fmt.Sprintf("p%d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "a.go"), []byte("package p\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	key := func(args string) string {
		t.Helper()
		_, k, _, err := goSourceFiles(root, "go1", Spec{TokenizerType: "Llama2Tokenizer", TokenizerArgs: args})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	plain, a, b := key(""), key("-tokenizer-model a.model"), key("-tokenizer-model b.model")
	if plain == a || a == b || plain == b {
		t.Errorf("keys %s (no args), %s (a.model), %s (b.model): want three different keys", plain, a, b)
	}
	if again := key(""); again != plain {
		t.Errorf("key without args %s, then %s", plain, again)
	}
}
