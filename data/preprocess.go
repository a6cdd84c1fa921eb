package data

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"
)

// PreprocessConfig configures Preprocess; the fields follow the flags of Megatron's
// tools/preprocess_data.py. The zero value of an optional field means its default.
type PreprocessConfig struct {
	Input        string   // JSON-lines file; required
	OutputPrefix string   // output is {OutputPrefix}_{key}_{document|sentence}.bin/.idx; required
	JSONKeys     []string // keys to tokenize, one dataset each; default ["text"]
	// AppendEOD appends the tokenizer's EOD id to the last sequence of each non-empty
	// document.
	AppendEOD bool
	// SplitSentences splits string values into sentences with Punkt (English), one
	// sequence each, and names the output _sentence instead of _document. List values are
	// taken as already split.
	SplitSentences bool
	// Workers is the number of goroutines tokenizing; default runtime.GOMAXPROCS(0).
	Workers int
	// Strict makes the first bad line (see LineError) fatal; by default bad lines are
	// skipped, reported to OnBadLine and counted in the summary.
	Strict bool
	// DType of the output tokens; default DTypeForVocab of the tokenizer's vocabulary size.
	DType DType
	// BatchLines is the number of lines per unit of work; default 1024. A batch also ends
	// after 256 KiB of input, so memory stays bounded with long lines.
	BatchLines int
	// OnBadLine, if set, receives each skipped line's error, in input order, from the
	// goroutine that called Preprocess.
	OnBadLine func(*LineError)
	// Progress, if set, is called after each batch is written, from the goroutine that
	// called Preprocess.
	Progress func(PreprocessProgress)
}

// batchMaxBytes ends a batch early when its lines are long.
const batchMaxBytes = 256 << 10

// Validate checks the required fields and that the keys are distinct and non-empty.
func (c *PreprocessConfig) Validate() error {
	switch {
	case c.Input == "":
		return errors.New("data: preprocess: no input file")
	case c.OutputPrefix == "":
		return errors.New("data: preprocess: no output prefix")
	case c.Workers < 0 || c.BatchLines < 0:
		return fmt.Errorf("data: preprocess: negative workers (%d) or batch lines (%d)", c.Workers, c.BatchLines)
	case c.DType != 0 && !c.DType.Valid():
		return fmt.Errorf("data: preprocess: invalid dtype code %d", uint8(c.DType))
	}
	for i, k := range c.JSONKeys {
		if k == "" || slices.Contains(c.JSONKeys[:i], k) {
			return fmt.Errorf("data: preprocess: JSON key %q empty or repeated", k)
		}
	}
	return nil
}

// withDefaults returns c with defaults filled in.
func (c PreprocessConfig) withDefaults() PreprocessConfig {
	if len(c.JSONKeys) == 0 {
		c.JSONKeys = []string{"text"}
	}
	if c.Workers == 0 {
		c.Workers = runtime.GOMAXPROCS(0)
	}
	if c.BatchLines == 0 {
		c.BatchLines = 1024
	}
	return c
}

// OutputPrefixes returns the dataset prefix written for each JSON key, in key order.
func (c PreprocessConfig) OutputPrefixes() []string {
	c = c.withDefaults()
	level := "document"
	if c.SplitSentences {
		level = "sentence"
	}
	out := make([]string, len(c.JSONKeys))
	for i, k := range c.JSONKeys {
		out[i] = c.OutputPrefix + "_" + k + "_" + level
	}
	return out
}

// PreprocessProgress is a snapshot passed to PreprocessConfig.Progress.
type PreprocessProgress struct {
	Lines      int64         // input lines done
	Bytes      int64         // input bytes done
	TotalBytes int64         // size of the input file
	Elapsed    time.Duration // since Preprocess started
}

// PreprocessSummary reports what Preprocess wrote.
type PreprocessSummary struct {
	Lines     int64              // input lines read
	Documents int64              // lines written, one document per key each
	BadLines  int64              // lines skipped (see LineError)
	Bytes     int64              // input bytes read
	Elapsed   time.Duration      // wall time of the whole run
	Outputs   []PreprocessOutput // one per JSON key
}

// PreprocessOutput describes the dataset written for one JSON key.
type PreprocessOutput struct {
	Key            string // the JSON key
	Prefix         string // the .bin/.idx path prefix
	DType          DType  // the dtype of the tokens
	Sequences      int64  // sequences written
	Tokens         int64  // tokens written, EODs included
	EmptyDocuments int64  // documents with no sequences (their text had no tokens)
}

// MBPerSecond returns the input throughput in MB/s (10^6 bytes).
func (s *PreprocessSummary) MBPerSecond() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Bytes) / 1e6 / s.Elapsed.Seconds()
}

// batch is a run of consecutive input lines and, once encoded, their documents.
type batch struct {
	first int64    // line number of lines[0]
	lines [][]byte // each without its newline
	bytes int64    // input bytes, newlines included
	docs  []keyDocs
	bad   []*LineError
	err   error // a fatal error (a worker could not start)
}

// Preprocess tokenizes the JSON-lines file cfg.Input with tok into one indexed dataset per
// JSON key, like Megatron's tools/preprocess_data.py, in bounded memory: a reader goroutine
// cuts the input into batches, cfg.Workers goroutines encode them, and the calling goroutine
// writes them in input order. Outputs appear under their final names only when all are
// complete (each is renamed into place after all are written and synced); on an error or
// cancellation no output file is left behind, and the temporary files of a run that was
// killed are removed by the next run with the same outputs (see NewIndexedBuilder). An
// input whose every line is bad is an error giving the count and the first bad line.
func Preprocess(ctx context.Context, cfg PreprocessConfig, tok Tokenizer) (*PreprocessSummary, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	start := time.Now()
	p := &pipeline{cfg: cfg, tok: tok, eod: -1}
	if cfg.AppendEOD {
		if p.eod = tok.Special().EOD; p.eod < 0 {
			return nil, errors.New("data: preprocess: AppendEOD set but the tokenizer has no EOD token")
		}
	}
	dtype := cfg.DType
	if dtype == 0 {
		dtype = DTypeForVocab(tok.VocabSize())
	}
	in, err := os.Open(cfg.Input)
	if err != nil {
		return nil, fmt.Errorf("data: preprocess: %w", err)
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return nil, fmt.Errorf("data: preprocess: %w", err)
	}
	sum := &PreprocessSummary{}
	builders := make([]*IndexedBuilder, len(cfg.JSONKeys))
	defer func() {
		for _, b := range builders {
			if b != nil {
				b.Close() // removes temporary files unless committed
			}
		}
	}()
	for k, prefix := range cfg.OutputPrefixes() {
		if builders[k], err = NewIndexedBuilder(prefix, dtype); err != nil {
			return nil, err // names the file
		}
		sum.Outputs = append(sum.Outputs, PreprocessOutput{Key: cfg.JSONKeys[k], Prefix: prefix, DType: dtype})
	}
	progress := func() {
		if cfg.Progress != nil {
			cfg.Progress(PreprocessProgress{Lines: sum.Lines, Bytes: sum.Bytes, TotalBytes: st.Size(), Elapsed: time.Since(start)})
		}
	}
	if err := p.run(ctx, in, builders, sum, progress); err != nil {
		return nil, err
	}
	if sum.Lines > 0 && sum.Documents == 0 {
		return nil, fmt.Errorf("data: preprocess: all %d lines of %s are bad, nothing written; the first: %w", sum.BadLines, cfg.Input, p.firstBad)
	}
	for _, b := range builders {
		if err := b.finish(); err != nil {
			return nil, err
		}
	}
	for _, b := range builders {
		if err := b.commit(); err != nil {
			return nil, err
		}
	}
	sum.Elapsed = time.Since(start)
	return sum, nil
}

// run streams in through the reader and the workers and writes every batch to builders in
// input order, calling progress after each.
func (p *pipeline) run(ctx context.Context, in io.Reader, builders []*IndexedBuilder, sum *PreprocessSummary, progress func()) error {
	ctx, cancel := context.WithCancel(ctx)
	order := p.start(ctx, in)
	defer func() {
		cancel() // stops the reader if the loop below returned early
		p.wg.Wait()
	}()
	for res := range order {
		if err := p.write(<-res, builders, sum); err != nil {
			return err
		}
		progress()
	}
	if p.readErr != nil {
		return p.readErr
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("data: preprocess: %w", err)
	}
	return nil
}

// pipeline runs the reader and the workers of one Preprocess call.
type pipeline struct {
	cfg      PreprocessConfig
	tok      Tokenizer
	eod      int32
	wg       sync.WaitGroup
	readErr  error      // set by the reader before it closes order
	firstBad *LineError // the first bad line, set by the writer
	// free holds encoded-document buffers the writer is done with, for workers to reuse;
	// its capacity bounds how many are kept.
	free chan []keyDocs
}

// start launches the reader and workers. The reader sends each batch to the workers and, in
// input order, a channel on which that batch comes back encoded; both channels are bounded,
// so at most about 3·Workers batches are in memory.
func (p *pipeline) start(ctx context.Context, in io.Reader) <-chan chan *batch {
	order := make(chan chan *batch, 2*p.cfg.Workers)
	p.free = make(chan []keyDocs, 3*p.cfg.Workers+2)
	jobs := make(chan job, p.cfg.Workers)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(order)
		defer close(jobs)
		p.readErr = p.read(ctx, in, func(b *batch) bool {
			res := make(chan *batch, 1)
			select {
			case order <- res:
			case <-ctx.Done():
				return false
			}
			jobs <- job{b, res} // never blocks for long: workers drain jobs until it is closed
			return true
		})
	}()
	for range p.cfg.Workers {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			enc, err := newLineEncoder(p.tok, p.cfg.JSONKeys, p.eod, p.cfg.SplitSentences)
			for j := range jobs {
				if err != nil {
					j.b.err = err
				} else {
					p.encode(enc, j.b)
				}
				j.res <- j.b
			}
		}()
	}
	return order
}

// job is a batch to encode and the channel to send it back on.
type job struct {
	b   *batch
	res chan *batch
}

// read cuts in into batches and passes each to send, stopping when send returns false.
func (p *pipeline) read(ctx context.Context, in io.Reader, send func(*batch) bool) error {
	r := bufio.NewReaderSize(in, 64<<10)
	line := int64(0)
	b := &batch{first: 1}
	for {
		text, err := r.ReadBytes('\n')
		if len(text) > 0 {
			line++
			b.bytes += int64(len(text))
			b.lines = append(b.lines, trimNewline(text))
		}
		eof := errors.Is(err, io.EOF)
		if err != nil && !eof {
			return fmt.Errorf("data: preprocess: read %s line %d: %w", p.cfg.Input, line+1, err)
		}
		if len(b.lines) > 0 && (eof || len(b.lines) >= p.cfg.BatchLines || b.bytes >= batchMaxBytes) {
			if !send(b) {
				return nil
			}
			b = &batch{first: line + 1}
		}
		if eof {
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

func trimNewline(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	return b
}

// encode fills b.docs and b.bad from b.lines and drops the lines.
func (p *pipeline) encode(enc *lineEncoder, b *batch) {
	select {
	case b.docs = <-p.free:
		for k := range b.docs {
			b.docs[k].truncate(keyDocs{})
		}
	default:
		b.docs = make([]keyDocs, len(p.cfg.JSONKeys))
	}
	for i, line := range b.lines {
		if err := enc.encodeLine(line, b.docs); err != nil {
			b.bad = append(b.bad, &LineError{File: p.cfg.Input, Line: b.first + int64(i), Err: err})
		}
	}
	b.lines = nil
}

// write adds an encoded batch to the builders and the summary.
func (p *pipeline) write(b *batch, builders []*IndexedBuilder, sum *PreprocessSummary) error {
	if b.err != nil {
		return b.err
	}
	if len(b.bad) > 0 && p.cfg.Strict {
		return b.bad[0]
	}
	for k := range builders {
		d := &b.docs[k]
		if err := d.write(builders[k]); err != nil {
			return err // names the dataset
		}
		o := &sum.Outputs[k]
		o.Sequences += int64(len(d.lens))
		o.Tokens += int64(len(d.ids))
		prev := 0
		for _, end := range d.docEnds {
			if end == prev {
				o.EmptyDocuments++
			}
			prev = end
		}
	}
	for _, e := range b.bad {
		if p.firstBad == nil {
			p.firstBad = e
		}
		if p.cfg.OnBadLine != nil {
			p.cfg.OnBadLine(e)
		}
	}
	n := int64(len(b.docs[0].docEnds))
	sum.Documents += n
	sum.BadLines += int64(len(b.bad))
	sum.Lines += n + int64(len(b.bad))
	sum.Bytes += b.bytes
	select {
	case p.free <- b.docs:
	default:
	}
	b.docs = nil
	return nil
}
