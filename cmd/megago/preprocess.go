package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"golang.org/x/term"

	"megago/data"
	"megago/internal/listargs"
)

func init() {
	register(command{
		name:    "preprocess",
		summary: "tokenize JSON lines into Megatron indexed datasets (.bin/.idx)",
		usage: `megago preprocess -input FILE -output-prefix PREFIX -tokenizer-type TYPE [flags]

Preprocess tokenizes a JSON-lines file the way Megatron's tools/preprocess_data.py
does and writes one indexed dataset per JSON key, PREFIX_KEY_document.bin/.idx
(PREFIX_KEY_sentence with -split-sentences), byte-compatible with Megatron.
A string value is one sequence, a list of strings one sequence per non-empty
element; every line is one document. It streams in bounded memory, with
-workers goroutines tokenizing and the output in input order.

Bad lines (invalid JSON, a missing key, a value of the wrong type, text the
tokenizer rejects) are reported with their line number and skipped, or with
-strict end the run. Outputs appear under their final names only when complete.
A progress bar is shown when standard error is a terminal; a summary is printed
at the end.`,
		run: runPreprocess,
	})
}

// tokenizerFlags are Megatron's tokenizer flags, shared by preprocess and inspect.
type tokenizerFlags struct{ cfg data.TokenizerConfig }

func (t *tokenizerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.cfg.Type, "tokenizer-type", "", "GPT2BPETokenizer, BertWordPieceLowerCase, BertWordPieceCase, SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer, HuggingFaceTokenizer, TikTokenizer, NullTokenizer or gpt2")
	fs.StringVar(&t.cfg.VocabFile, "vocab-file", "", "vocabulary file (vocab.json, vocab.txt or a SentencePiece .model)")
	fs.StringVar(&t.cfg.MergeFile, "merge-file", "", "BPE merges file (merges.txt)")
	fs.IntVar(&t.cfg.VocabSize, "vocab-size", 0, "vocabulary size of the NullTokenizer (its EOD is vocab-size - 1); TikTokenizer: number of ids, special tokens included (0: 131072)")
	fs.StringVar(&t.cfg.TokenizerModel, "tokenizer-model", "", "HuggingFaceTokenizer: directory holding tokenizer.json and tokenizer_config.json; Llama2Tokenizer, GPTSentencePieceTokenizer, SentencePieceTokenizer: a SentencePiece .model file; TikTokenizer: its JSON vocabulary")
	fs.BoolVar(&t.cfg.HFNoSpecialTokens, "tokenizer-hf-no-include-special-tokens", false, "HuggingFaceTokenizer: leave out the post-processor's special tokens (BOS)")
	fs.BoolVar(&t.cfg.LegacyTokenizer, "legacy-tokenizer", false, "Megatron's legacy tokenizers: Llama2Tokenizer adds BOS before every text")
	fs.StringVar(&t.cfg.TiktokenPattern, "tiktoken-pattern", "v2", "TikTokenizer: pre-tokenizer pattern, v1 or v2")
	t.cfg.TiktokenNumSpecialTokens = data.DefaultTikTokenNumSpecial
	fs.Func("tiktoken-num-special-tokens", "TikTokenizer: number of special tokens, the first ids (default 1000)", data.TikTokenNumSpecialFlag(&t.cfg.TiktokenNumSpecialTokens))
	special := func(s string) error {
		t.cfg.SpecialTokens = append(t.cfg.SpecialTokens, strings.Fields(s)...)
		return nil
	}
	fs.Func("tokenizer-special-tokens", "TikTokenizer: special tokens in id order, separated by spaces (one value or the flag repeated); they must include <unk> <s> </s> <mask> <pad> <cls> <sep> (the default)", special)
	fs.Func("tiktoken-special-tokens", "TikTokenizer: Megatron's older name of -tokenizer-special-tokens", special)
}

// maxBadLinesShown is how many bad lines preprocess prints before only counting them.
const maxBadLinesShown = 20

func runPreprocess(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("preprocess", flag.ContinueOnError)
	var cfg data.PreprocessConfig
	var tf tokenizerFlags
	var keys, dtype string
	fs.StringVar(&cfg.Input, "input", "", "JSON-lines input file (required)")
	fs.StringVar(&cfg.OutputPrefix, "output-prefix", "", "path prefix of the outputs (required)")
	fs.StringVar(&keys, "json-keys", "text", "JSON keys to tokenize (Megatron's list: --json-keys text title; commas work too), one dataset each: PREFIX_KEY_document.{bin,idx} (_sentence with -split-sentences)")
	fs.BoolVar(&cfg.AppendEOD, "append-eod", false, "append the EOD token to the last sequence of each non-empty document")
	fs.BoolVar(&cfg.SplitSentences, "split-sentences", false, "split strings into sentences (Punkt, English), one sequence each")
	fs.IntVar(&cfg.Workers, "workers", runtime.GOMAXPROCS(0), "goroutines tokenizing in parallel")
	fs.BoolVar(&cfg.Strict, "strict", false, "stop at the first bad line instead of skipping it")
	fs.StringVar(&dtype, "dtype", "", "token dtype (uint16, int32, ...); default uint16 if the vocabulary is under 65500 ids, else int32")
	tf.register(fs)
	args = listargs.Join(args, "json-keys") // Megatron's nargs='+'
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	cfg.JSONKeys = strings.FieldsFunc(keys, func(r rune) bool { return r == ',' || r == ' ' })
	switch {
	case cfg.Input == "" || cfg.OutputPrefix == "":
		return &usageError{errors.New("-input and -output-prefix are required")}
	case tf.cfg.Type == "":
		return &usageError{errors.New("-tokenizer-type is required")}
	case cfg.Workers < 1:
		return &usageError{fmt.Errorf("-workers %d: want at least 1", cfg.Workers)}
	}
	if dtype != "" {
		d, err := data.ParseDType(dtype)
		if err != nil {
			return &usageError{err}
		}
		cfg.DType = d
	}
	tok, err := data.NewTokenizer(tf.cfg)
	if err != nil {
		return err
	}

	bad := 0
	cfg.OnBadLine = func(e *data.LineError) {
		bad++
		if bad <= maxBadLinesShown {
			fmt.Fprintf(stderr, "%sskipped %v\n", clearLine(stderr), e)
		} else if bad == maxBadLinesShown+1 {
			fmt.Fprintf(stderr, "%sfurther bad lines are counted but not shown\n", clearLine(stderr))
		}
	}
	bar := newProgressBar(stderr)
	if bar != nil {
		cfg.Progress = bar.update
	}
	sum, err := data.Preprocess(ctx, cfg, tok)
	if cfg.Progress != nil {
		bar.finish()
	}
	if err != nil {
		return err
	}
	printSummary(stdout, cfg.Input, sum)
	return nil
}

func printSummary(w io.Writer, input string, s *data.PreprocessSummary) {
	fmt.Fprintf(w, "%s: %d lines, %d documents, %d bad lines skipped; %.1f MB in %s (%.1f MB/s)\n",
		input, s.Lines, s.Documents, s.BadLines, float64(s.Bytes)/1e6, s.Elapsed.Round(time.Millisecond), s.MBPerSecond())
	for _, o := range s.Outputs {
		fmt.Fprintf(w, "  %s: %s.{bin,idx}: %d sequences, %d tokens (%s), %d empty documents\n",
			o.Key, o.Prefix, o.Sequences, o.Tokens, o.DType, o.EmptyDocuments)
	}
}

// progressBar draws one status line on a terminal, at most five times a second.
type progressBar struct {
	w    io.Writer
	last time.Time
}

// newProgressBar returns a bar drawing on w if w is a terminal, else nil.
func newProgressBar(w io.Writer) *progressBar {
	if !isTerminal(w) {
		return nil
	}
	return &progressBar{w: w}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// clearLine returns the sequence that erases a progress bar on w, if w is a terminal.
func clearLine(w io.Writer) string {
	if isTerminal(w) {
		return "\r\033[K"
	}
	return ""
}

func (b *progressBar) update(p data.PreprocessProgress) {
	now := time.Now()
	if now.Sub(b.last) < 200*time.Millisecond {
		return
	}
	b.last = now
	rate := float64(p.Bytes) / p.Elapsed.Seconds() // bytes per second
	line := fmt.Sprintf("%d documents  %.1f MB/s", p.Lines, rate/1e6)
	if p.TotalBytes > 0 && rate > 0 {
		frac := float64(p.Bytes) / float64(p.TotalBytes)
		eta := time.Duration(float64(p.TotalBytes-p.Bytes) / rate * float64(time.Second))
		width := 30
		done := min(width, int(frac*float64(width)))
		line = fmt.Sprintf("[%s%s] %5.1f%%  %s  ETA %s", strings.Repeat("=", done), strings.Repeat(" ", width-done), 100*frac, line, eta.Round(time.Second))
	}
	fmt.Fprintf(b.w, "\r\033[K%s", line)
}

func (b *progressBar) finish() { fmt.Fprint(b.w, "\r\033[K") }
