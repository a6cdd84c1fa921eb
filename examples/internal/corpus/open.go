package corpus

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"megago/data"
	"megago/examples/internal/settings"
)

// Sources opens an example's token sources: the datasets of --data-path, those of
// --train-data-path followed by those of --valid-data-path (BlendSplit picks them), or
// without them the default corpus s describes (GoSource, built on first use; s's cache and tokenizer
// names are taken from c), checked against a vocabulary of vocab ids (Open). about says
// in one line where the tokens come from; files, for the default corpus only, is the
// file of each document. builder and log are GoSource's.
func Sources(ctx context.Context, c *settings.Common, s Spec, vocab int, builder bool, log io.Writer) (sources []*data.IndexedDataset, about string, files []string, err error) {
	if s.Cache, err = c.Cache(); err != nil {
		return nil, "", nil, err
	}
	s.TokenizerType, s.VocabFile, s.MergeFile = c.TokenizerType, c.VocabFile, c.MergeFile
	s.TokenizerArgs = c.TokenizerArgs()
	prefixes, _, _ := c.Blend() // checked with the flags
	if perSplit := splitPrefixes(c); perSplit != nil {
		prefixes = append(perSplit[data.SplitTrain], perSplit[data.SplitValid]...)
		about = splitAbout(c)
	} else if len(prefixes) == 0 {
		src, err := GoSource(ctx, s, builder, log)
		if err != nil {
			return nil, "", nil, err
		}
		prefixes, about, files = []string{src.Prefix}, src.About, src.Files
	} else {
		about = fmt.Sprintf("--data-path %s", strings.Join(c.DataPath, " "))
	}
	sources, err = Open(prefixes, vocab, c.TokenizerType)
	return sources, about, files, err
}

// Open opens the indexed datasets at prefixes and checks that every token id fits the
// tokenizer's vocabulary of vocab ids (tokType names it in the error). On an error it
// closes what it opened.
func Open(prefixes []string, vocab int, tokType string) ([]*data.IndexedDataset, error) {
	var out []*data.IndexedDataset
	fail := func(err error) ([]*data.IndexedDataset, error) {
		for _, ds := range out {
			ds.Close()
		}
		return nil, err
	}
	for _, p := range prefixes {
		ds, err := data.OpenIndexed(p, data.ReadMmap)
		if err != nil {
			return fail(fmt.Errorf("--data-path: %w", err))
		}
		out = append(out, ds)
		id, err := maxTokenID(ds)
		if err != nil {
			return fail(fmt.Errorf("--data-path: %w", err))
		}
		if id >= int64(vocab) {
			return fail(fmt.Errorf("--data-path %s holds token id %d, but the %s tokenizer has %d ids: the dataset was made with another vocabulary (--tokenizer-type, --vocab-file)",
				p, id, tokType, vocab))
		}
	}
	return out, nil
}

// maxTokenID returns the largest token id in ds (-1 if it is empty), or ds's read error.
func maxTokenID(ds *data.IndexedDataset) (int64, error) {
	m := int64(-1)
	var buf []int32
	for i := range ds.NumSequences() {
		var err error
		if buf, err = ds.ReadTokens(buf[:0], i, 0, ds.SequenceLen(i)); err != nil {
			return 0, err
		}
		for _, id := range buf {
			m = max(m, int64(id))
		}
	}
	return m, nil
}

// Unigram counts token ids: of a training split, for the reference numbers a trained
// model must beat. The zero value is empty and ready to use.
type Unigram struct {
	Counts []int64 // per token id
	Total  int64
}

// Add counts the tokens of sequences [first, last) of src; it returns src's read error.
func (u *Unigram) Add(src data.TokenSource, first, last int) error {
	var buf []int32
	for i := first; i < last; i++ {
		var err error
		if buf, err = src.ReadTokens(buf[:0], i, 0, src.SequenceLen(i)); err != nil {
			return err
		}
		for _, id := range buf {
			if int(id) >= len(u.Counts) {
				u.Counts = append(u.Counts, make([]int64, int(id)+1-len(u.Counts))...)
			}
			u.Counts[id]++
		}
		u.Total += int64(len(buf))
	}
	return nil
}

// Entropy returns the unigram entropy of the counted tokens in nats: the loss of the
// best model that ignores context.
func (u *Unigram) Entropy() float64 {
	h := 0.0
	for _, k := range u.Counts {
		if k > 0 {
			p := float64(k) / float64(u.Total)
			h -= p * math.Log(p)
		}
	}
	return h
}

// MostFrequent returns the most frequent token id (the smallest of equals), -1 if none
// was counted.
func (u *Unigram) MostFrequent() int32 {
	best := -1
	for id, k := range u.Counts {
		if k > 0 && (best < 0 || k > u.Counts[best]) {
			best = id
		}
	}
	return int32(best)
}

// WaitForFile polls for path until it exists or ctx ends.
func WaitForFile(ctx context.Context, path string) error {
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s (built by local rank 0): %w", path, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
