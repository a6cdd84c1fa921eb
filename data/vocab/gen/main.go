// Command gen trains the byte-level BPE vocabulary that megago ships in data/vocab (see
// data.GoSourceBPE) and writes vocab.json, merges.txt and README.md there.
//
// The corpus is always present and permissively licensed: the non-test .go files of a
// fixed list of standard-library packages in the local Go installation's GOROOT/src,
// read in sorted path order, one document per file. Training is deterministic, so the
// same Go release gives the same files. Run from the data directory:
//
//	go generate ./data   (or: cd data && go run ./vocab/gen -out vocab)
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"megago/data"
)

// packages are the corpus: standard-library directories (not recursive).
var packages = []string{
	"bufio", "bytes", "container/heap", "context", "crypto/sha256", "encoding/binary",
	"encoding/json", "errors", "flag", "fmt", "go/ast", "go/parser", "go/printer", "go/token",
	"hash", "io", "log", "math", "math/big", "net/http", "os", "path/filepath", "regexp",
	"sort", "strconv", "strings", "sync", "text/template", "time", "unicode/utf8",
}

func main() {
	out := flag.String("out", "vocab", "directory to write vocab.json, merges.txt and README.md to")
	size := flag.Int("size", 8192, "vocabulary size, <|endoftext|> included")
	flag.Parse()
	if err := run(*out, *size); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(out string, size int) error {
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return fmt.Errorf("go env GOROOT: %w", err)
	}
	src := filepath.Join(strings.TrimSpace(string(goroot)), "src")
	var files []string
	for _, p := range packages {
		m, err := filepath.Glob(filepath.Join(src, filepath.FromSlash(p), "*.go"))
		if err != nil {
			return err
		}
		for _, f := range m {
			if !strings.HasSuffix(f, "_test.go") {
				files = append(files, f)
			}
		}
	}
	slices.Sort(files)
	tr := data.NewBPETrainer()
	var docs []string
	nbytes := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		tr.Add(string(b))
		docs = append(docs, string(b))
		nbytes += len(b)
	}
	start := time.Now()
	tok, err := tr.Train(size)
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	if err := tok.WriteFiles(filepath.Join(out, "vocab.json"), filepath.Join(out, "merges.txt")); err != nil {
		return err
	}
	ntok := 0
	for _, d := range docs {
		ntok += len(tok.Encode(d))
	}
	readme := fmt.Sprintf(readmeFormat, tok.VocabSize(), tok.NumMerges(), tok.Special().EOD,
		runtime.Version(), len(files), len(packages), strings.Join(packages, " "),
		float64(nbytes)/1e6, float64(nbytes)/float64(ntok))
	fmt.Printf("trained %d ids (%d merges) on %d files, %.2f MB, in %v; %.2f bytes/token\n",
		tok.VocabSize(), tok.NumMerges(), len(files), float64(nbytes)/1e6, elapsed.Round(time.Millisecond),
		float64(nbytes)/float64(ntok))
	return os.WriteFile(filepath.Join(out, "README.md"), []byte(readme), 0o644)
}

const readmeFormat = `# The shipped example vocabulary

vocab.json and merges.txt are a GPT-2-format byte-level BPE vocabulary that megago's
examples use (data.GoSourceBPE, tokenizer type "gosource-bpe"); any GPT-2 BPE reader,
Megatron's GPT2BPETokenizer included, loads them.

- %d ids: the 256 bytes (ids 0..255, GPT-2's byte ids), %d merges, and <|endoftext|> = %d.
- Trained by data.BPETrainer (gen/main.go, ` + "`go generate ./data`" + `) with %s on the %d
  non-test .go files of %d standard-library packages of that Go release's GOROOT/src
  (BSD-licensed): %s.
- Corpus: %.2f MB; the vocabulary encodes it at %.2f bytes per token.
`
