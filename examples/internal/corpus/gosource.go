package corpus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"megago/data"
	"megago/internal/atomicfile"
)

// The default corpus: a fixed quarter of the non-test, hand-written .go files of the
// local Go installation's standard library (GOROOT/src without cmd, vendor and testdata
// trees), one document per file, in a fixed pseudo-random order.
const (
	corpusSample  = 4       // keep the files whose path hashes to 0 mod corpusSample
	corpusMaxFile = 100_000 // bytes; larger files are mostly tables
)

// Spec says how to build the default corpus.
type Spec struct {
	// Cache is the directory under which the corpus is cached.
	Cache string
	// Tokenizer encodes the files; TokenizerType, VocabFile and MergeFile name it (its
	// flags) in the cache key and in the equivalent megago preprocess command.
	Tokenizer                           data.Tokenizer
	TokenizerType, VocabFile, MergeFile string
	// TokenizerArgs are the other flags that choose the tokenizer's files and settings
	// ("-tokenizer-model FILE -legacy-tokenizer"; settings.Common.TokenizerArgs).
	TokenizerArgs string
	// Sentences splits a document into its sequences (BERT's and T5's sentences), whose
	// concatenation is the document; nil makes each file one sequence followed by the
	// end-of-document token (GPT).
	Sentences func(text string) []string
	// Documents, with Sentences, splits a file into documents (Declarations); nil makes
	// each file one document.
	Documents func(text string) []string
	// Unit names the split in the cache directory and the description, as
	// "DOCUMENTS-SENTENCES" ("declarations-lines"), or "SENTENCES" ("lines") for whole
	// files as documents.
	Unit string
}

// Source is the default corpus as built.
type Source struct {
	Prefix string   // of the indexed dataset
	About  string   // one line: what it holds and where it is cached
	Files  []string // document i comes from file Files[i], relative to GOROOT/src, with /
}

// GoSource returns the default corpus, building it if needed. builder is true on the
// one process per host that may build it; the others wait for its files. log receives a
// line or two while it is built.
func GoSource(ctx context.Context, s Spec, builder bool, log io.Writer) (*Source, error) {
	prefix, about, files, err := goSource(ctx, s, builder, log)
	if err != nil {
		return nil, err
	}
	if s.Sentences != nil { // a file may hold several documents: the build listed them
		b, err := os.ReadFile(prefix + documentsSuffix)
		if err != nil {
			return nil, fmt.Errorf("the default corpus: %w", err)
		}
		files = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	}
	for i, f := range files {
		files[i] = filepath.ToSlash(f)
	}
	return &Source{Prefix: prefix, About: about, Files: files}, nil
}

// documentsSuffix names the file, beside a sentence corpus's .bin and .idx, that lists
// the file of each document, one a line.
const documentsSuffix = ".documents.txt"

func goSource(ctx context.Context, s Spec, builder bool, log io.Writer) (prefix, about string, files []string, err error) {
	root, version, err := goInstallation()
	if err != nil {
		return "", "", nil, err
	}
	files, key, size, err := goSourceFiles(root, version, s)
	if err != nil {
		return "", "", nil, err
	}
	name := "gosrc-"
	each := "one document each"
	if s.Sentences != nil {
		name += s.Unit + "-"
		doc, sent, ok := strings.Cut(s.Unit, "-")
		if !ok { // a unit of sentences only: whole files are the documents
			doc, sent = "files", s.Unit
		}
		each = fmt.Sprintf("one document per %s, one sentence per %s", strings.TrimSuffix(doc, "s"), strings.TrimSuffix(sent, "s"))
	}
	dir := filepath.Join(s.Cache, name+version+"-"+key)
	prefix = filepath.Join(dir, "gosrc_text_document")
	about = fmt.Sprintf("%d .go files of %s's standard library (%s, %.1f MB), %s, cached in %s",
		len(files), version, filepath.Join(root, "src"), float64(size)/1e6, each, dir)
	idx, _ := data.IndexedPaths(prefix)
	if _, err := os.Stat(idx); err == nil {
		return prefix, about, files, nil
	}
	if !builder {
		return prefix, about, files, WaitForFile(ctx, idx)
	}
	fmt.Fprintf(log, "preparing the default corpus (first run only): %s\n", about)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", nil, err
	}
	if s.Sentences != nil {
		return prefix, about, files, buildSentences(ctx, prefix, root, files, s, log)
	}
	start := time.Now()
	jsonl := filepath.Join(dir, "corpus.jsonl")
	if err := writeJSONL(jsonl, root, files); err != nil {
		return "", "", nil, err
	}
	sum, err := data.Preprocess(ctx, data.PreprocessConfig{Input: jsonl, OutputPrefix: filepath.Join(dir, "gosrc"),
		JSONKeys: []string{"text"}, AppendEOD: true, Strict: true}, s.Tokenizer)
	if err != nil {
		return "", "", nil, fmt.Errorf("tokenizing the default corpus: %w", err)
	}
	fmt.Fprintf(log, "tokenized %d documents into %d tokens in %.1fs (the same as: megago preprocess -input %s -output-prefix %s -tokenizer-type %s%s -append-eod)\n",
		sum.Documents, sum.Outputs[0].Tokens, time.Since(start).Seconds(), jsonl, filepath.Join(dir, "gosrc"), s.TokenizerType, prefixSpace(s.TokenizerArgs))
	return prefix, about, files, nil
}

// buildSentences writes the corpus with one sequence per sentence, and the file of each
// document in prefix + documentsSuffix (before the index, whose presence says the
// corpus is complete).
func buildSentences(ctx context.Context, prefix, root string, files []string, s Spec, log io.Writer) error {
	start := time.Now()
	b, err := data.NewIndexedBuilder(prefix, data.Int32)
	if err != nil {
		return err
	}
	defer b.Close() // after Finalize, a no-op
	tokens := 0
	var docFiles strings.Builder
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		text, err := os.ReadFile(filepath.Join(root, "src", f))
		if err != nil {
			return err
		}
		docs := []string{string(text)}
		if s.Documents != nil {
			docs = s.Documents(string(text))
		}
		for _, doc := range docs {
			var ids []int32
			var lengths []int
			for _, sent := range s.Sentences(doc) {
				if enc := s.Tokenizer.Encode(sent); len(enc) > 0 {
					ids = append(ids, enc...)
					lengths = append(lengths, len(enc))
				}
			}
			if err := b.AddDocument(ids, lengths); err != nil {
				return err
			}
			fmt.Fprintln(&docFiles, filepath.ToSlash(f))
			tokens += len(ids)
		}
	}
	if err := atomicfile.WriteFile(prefix+documentsSuffix, []byte(docFiles.String())); err != nil {
		return err
	}
	if err := b.Finalize(); err != nil {
		return fmt.Errorf("tokenizing the default corpus: %w", err)
	}
	fmt.Fprintf(log, "tokenized %d files into %d documents (%d sentences) of %d tokens in %.1fs\n",
		len(files), b.NumDocuments(), b.NumSequences(), tokens, time.Since(start).Seconds())
	return nil
}

// Declarations splits gofmt'd Go source into its top-level paragraphs: the package
// clause, the imports, and each declaration with its doc comment (a top-level comment
// standing alone, such as the copyright notice, is a paragraph too). A paragraph starts
// at an unindented line after a blank one that does not close a block ("}" or ")");
// blank lines stay with the paragraph before them, so the paragraphs concatenate to the
// text.
func Declarations(text string) []string {
	var out []string
	start, blank := 0, true // the previous line was blank (or there was none)
	for i := 0; i < len(text); {
		n := strings.IndexByte(text[i:], '\n') + 1
		if n == 0 {
			n = len(text) - i
		}
		line := text[i : i+n]
		empty := strings.TrimSpace(line) == ""
		if blank && !empty && i > start && !strings.ContainsRune(" \t})", rune(line[0])) {
			out = append(out, text[start:i])
			start = i
		}
		blank = empty
		i += n
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}

// Lines splits Go source into sentences for BERT's sentence order and T5's spans: each
// non-blank line with its newline, blank lines kept with the line before them (so the
// sentences concatenate to the text).
func Lines(text string) []string {
	var out []string
	for len(text) > 0 {
		n := strings.IndexByte(text, '\n') + 1
		if n == 0 {
			n = len(text)
		}
		line := text[:n]
		text = text[n:]
		if len(out) > 0 && strings.TrimSpace(line) == "" {
			out[len(out)-1] += line
			continue
		}
		out = append(out, line)
	}
	return out
}

// goInstallation returns the local Go installation's root and version: `go env GOROOT`
// (the go command that builds megago), else the root this program was built with.
func goInstallation() (root, version string, err error) {
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
		root = strings.TrimSpace(string(out))
	}
	if root == "" {
		root = runtime.GOROOT() //nolint:staticcheck // the fallback when no go command is on PATH
	}
	if root == "" {
		return "", "", errors.New("the default corpus needs a Go installation (no go command on PATH and no GOROOT); give --data-path")
	}
	version = runtime.Version()
	if b, err := os.ReadFile(filepath.Join(root, "VERSION")); err == nil {
		version = strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
	}
	return root, version, nil
}

// goSourceFiles lists the default corpus's files (relative to root/src, in a fixed
// shuffled order) and returns them with the cache key and their total size.
func goSourceFiles(root, version string, s Spec) (files []string, key string, size int64, err error) {
	src := filepath.Join(root, "src")
	h := sha256.New()
	fmt.Fprintf(h, "megago gosrc v2\n%s\n%s %s %s\n", version, s.TokenizerType, s.VocabFile, s.MergeFile)
	if s.TokenizerArgs != "" { // absent from older keys, which stay valid
		fmt.Fprintf(h, "tokenizer: %s\n", s.TokenizerArgs)
	}
	if s.Sentences != nil {
		fmt.Fprintf(h, "sentences: %s\n", s.Unit)
	}
	err = filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			if n := d.Name(); rel == "cmd" || n == "vendor" || n == "testdata" || n[0] == '.' || n[0] == '_' {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") || !sampled(rel) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil || len(b) > corpusMaxFile || generated(b) {
			return err
		}
		files = append(files, rel)
		size += int64(len(b))
		fmt.Fprintf(h, "%s %d\n", filepath.ToSlash(rel), len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return nil, "", 0, fmt.Errorf("reading the Go sources for the default corpus: %w", err)
	}
	if len(files) == 0 {
		return nil, "", 0, fmt.Errorf("no Go sources under %s for the default corpus; give --data-path", src)
	}
	// Megatron's --split takes contiguous runs of documents; in path order the validation
	// split would be a few packages (syscall tables, time, unicode), so shuffle the files.
	sort.Slice(files, func(i, j int) bool { return pathHash(files[i], "order") < pathHash(files[j], "order") })
	return files, hex.EncodeToString(h.Sum(nil))[:12], size, nil
}

// sampled reports whether the file at rel belongs to the default corpus.
func sampled(rel string) bool { return pathHash(rel, "sample")%corpusSample == 0 }

// pathHash is a hash of a file's path (with /) and a purpose.
func pathHash(rel, purpose string) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s:%s", purpose, filepath.ToSlash(rel))
	return h.Sum64()
}

// generated reports whether a Go file says it was generated (tables, syscall numbers).
func generated(b []byte) bool {
	head := string(b[:min(len(b), 2048)])
	return strings.Contains(head, "// Code generated") && strings.Contains(head, "DO NOT EDIT")
}

// writeJSONL writes one {"text": ...} line per file, atomically (a reader sees the whole
// file or none), the input format of megago preprocess.
func writeJSONL(path, root string, files []string) error {
	return atomicfile.Write(path, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		for _, f := range files {
			b, err := os.ReadFile(filepath.Join(root, "src", f))
			if err != nil {
				return err
			}
			if err := enc.Encode(struct {
				Text string `json:"text"`
				Path string `json:"path"`
			}{string(b), filepath.ToSlash(f)}); err != nil {
				return err
			}
		}
		return nil
	})
}

// prefixSpace returns s after a space, or "" if s is empty.
func prefixSpace(s string) string {
	if s == "" {
		return ""
	}
	return " " + s
}
