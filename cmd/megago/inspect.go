package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"megago/data"
)

func init() {
	register(command{
		name:    "inspect",
		summary: "print an indexed dataset's header, counts, token statistics and first samples",
		usage: `megago inspect [flags] PREFIX

Inspect opens the Megatron indexed dataset PREFIX.idx + PREFIX.bin, validates it,
and prints its header, its sequence, document and token counts, statistics of
the sequence lengths and token ids, and its first sequences: decoded with the
tokenizer named by -tokenizer-type if given, else as ids separated by spaces.`,
		run: runInspect,
	})
}

// inspectMaxTokens is how many tokens of a sample inspect prints.
const inspectMaxTokens = 64

func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	var tf tokenizerFlags
	mode := fs.String("mode", "mmap", "read mode: mmap, cached or lazy")
	samples := fs.Int("samples", 3, "number of sequences to print")
	tf.register(fs)
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &usageError{errors.New("inspect takes one dataset prefix (PREFIX.idx, PREFIX.bin)")}
	}
	prefix := strings.TrimSuffix(strings.TrimSuffix(fs.Arg(0), ".idx"), ".bin")
	rm, err := data.ParseReadMode(*mode)
	if err != nil {
		return &usageError{err}
	}
	var tok data.Tokenizer
	if tf.cfg.Type != "" {
		if tok, err = data.NewTokenizer(tf.cfg); err != nil {
			return err
		}
	}
	ds, err := data.OpenIndexed(prefix, rm)
	if err != nil {
		return err
	}
	defer ds.Close()
	if err := printHeader(stdout, ds); err != nil {
		return err
	}
	st, err := readStats(ctx, ds)
	if err != nil {
		return err
	}
	st.print(stdout)
	return printSamples(stdout, ds, tok, *samples)
}

func printHeader(w io.Writer, ds *data.IndexedDataset) error {
	idxPath, binPath := data.IndexedPaths(ds.Prefix())
	var sizes [2]int64
	for i, p := range []string{idxPath, binPath} {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		sizes[i] = fi.Size()
	}
	fmt.Fprintf(w, "dataset    %s (.idx %d bytes, .bin %d bytes, read mode %s)\n", ds.Prefix(), sizes[0], sizes[1], ds.Mode())
	fmt.Fprintf(w, "header     MMIDIDX version 1, dtype %s (code %d, %d bytes), sequence modes: %v\n",
		ds.DType(), uint8(ds.DType()), ds.DType().Size(), ds.HasModes())
	return nil
}

// datasetStats are the counts and extremes inspect reports.
type datasetStats struct {
	seqs, docs, emptyDocs int
	tokens                int64
	minLen, maxLen        int
	minID, maxID          int32
}

// readStats reads every token once.
func readStats(ctx context.Context, ds *data.IndexedDataset) (datasetStats, error) {
	st := datasetStats{seqs: ds.NumSequences(), docs: ds.NumDocuments(), minLen: math.MaxInt, minID: math.MaxInt32, maxID: math.MinInt32}
	for j := range st.docs {
		if s, e := ds.Document(j); s == e {
			st.emptyDocs++
		}
	}
	var buf []int32
	for i := range st.seqs {
		if i%4096 == 0 && ctx.Err() != nil {
			return st, ctx.Err()
		}
		n := ds.SequenceLen(i)
		st.tokens += int64(n)
		st.minLen, st.maxLen = min(st.minLen, n), max(st.maxLen, n)
		var err error
		if buf, err = ds.ReadTokens(buf[:0], i, 0, n); err != nil {
			return st, err
		}
		for _, id := range buf {
			st.minID, st.maxID = min(st.minID, id), max(st.maxID, id)
		}
	}
	return st, nil
}

func (st datasetStats) print(w io.Writer) {
	fmt.Fprintf(w, "sequences  %d\n", st.seqs)
	fmt.Fprintf(w, "documents  %d (%d empty)\n", st.docs, st.emptyDocs)
	fmt.Fprintf(w, "tokens     %d\n", st.tokens)
	if st.seqs > 0 {
		fmt.Fprintf(w, "length     min %d, max %d, mean %.2f\n", st.minLen, st.maxLen, float64(st.tokens)/float64(st.seqs))
	}
	if st.tokens > 0 {
		fmt.Fprintf(w, "ids        min %d, max %d\n", st.minID, st.maxID)
	}
}

// printSamples prints the first n sequences with their document, decoded by tok if it is
// not nil, else as ids.
func printSamples(w io.Writer, ds *data.IndexedDataset, tok data.Tokenizer, n int) error {
	doc := 0
	for i := range min(n, ds.NumSequences()) {
		for _, end := ds.Document(doc); end <= i; _, end = ds.Document(doc) {
			doc++
		}
		length := ds.SequenceLen(i)
		ids, err := ds.ReadTokens(nil, i, 0, min(length, inspectMaxTokens))
		if err != nil {
			return err
		}
		var text string
		if tok != nil {
			text = strconv.Quote(tok.Decode(ids))
		} else {
			parts := make([]string, len(ids))
			for k, id := range ids {
				parts[k] = strconv.Itoa(int(id))
			}
			text = strings.Join(parts, " ")
		}
		more := ""
		if length > len(ids) {
			more = fmt.Sprintf(" ... (%d more)", length-len(ids))
		}
		fmt.Fprintf(w, "sample %d   document %d, %d tokens: %s%s\n", i, doc, length, text, more)
	}
	return nil
}
