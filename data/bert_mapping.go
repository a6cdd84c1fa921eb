package data

import (
	"context"
	"fmt"
	"strings"
)

// The sentence mapping of BERT and T5 (Megatron's build_mapping). Each sequence of the
// source is a sentence and each document a group of sentences. Within a document,
// consecutive sentences are gathered into one sample until their tokens reach the
// sample's target length, provided enough sentences remain for another sample; the last
// sample of a document takes the rest. A sample needs at least minSentences sentences (2
// for BERT's pairs), so documents with fewer are skipped. The target is maxTokens, or
// with probability shortSeqProb uniform in [2, maxTokens]. Epochs over the split's
// documents repeat (with new targets) until there are numSamples samples; the rows are
// then shuffled. A sample may hold more tokens than its target: the reader truncates.

// mappingSpec configures buildSentenceMapping.
type mappingSpec struct {
	maxTokens    int
	shortSeqProb float64
	minSentences int
	numSamples   int // ≤ 0: one epoch
}

// buildSentenceMapping returns rows (first sentence, end sentence, target length),
// flattened, over documents [lo, hi) of src.
func buildSentenceMapping(src TokenSource, lo, hi int, spec mappingSpec, r *rng) ([]int64, error) {
	target := func() int64 {
		if spec.shortSeqProb > 0 && r.float64() < spec.shortSeqProb && spec.maxTokens > 2 {
			return int64(2 + r.intn(spec.maxTokens-1))
		}
		return int64(spec.maxTokens)
	}
	var rows []int64
	for epoch := 0; epoch == 0 || len(rows)/3 < spec.numSamples; epoch++ {
		before := len(rows)
		for d := lo; d < hi; d++ {
			s0, s1 := src.Document(d)
			if s1-s0 < spec.minSentences {
				continue
			}
			start, size, tgt := s0, 0, target()
			for k := s0; k < s1; k++ {
				size += src.SequenceLen(k)
				remain, nsent := s1-k-1, k-start+1
				if (int64(size) >= tgt && remain >= spec.minSentences && nsent >= spec.minSentences) || remain == 0 {
					if nsent >= spec.minSentences && size > 0 {
						rows = append(rows, int64(start), int64(k+1), tgt)
					}
					start, size, tgt = k+1, 0, target()
				}
			}
		}
		if len(rows) == before {
			return nil, fmt.Errorf("no document in [%d, %d) has %d or more sentences with tokens", lo, hi, spec.minSentences)
		}
	}
	perm := make([]int64, len(rows)/3)
	for i := range perm {
		perm[i] = int64(i)
	}
	r.shuffle(perm)
	out := make([]int64, 0, len(rows))
	for _, p := range perm {
		out = append(out, rows[3*p:3*p+3]...)
	}
	return out, nil
}

// readSentences appends the tokens of sentences [lo, hi) of src to dst, at most limit
// tokens in all when limit ≥ 0.
func readSentences(src TokenSource, dst []int32, lo, hi, limit int) ([]int32, error) {
	for k := lo; k < hi && (limit < 0 || len(dst) < limit); k++ {
		n := src.SequenceLen(k)
		if limit >= 0 {
			n = min(n, limit-len(dst))
		}
		var err error
		if dst, err = src.ReadTokens(dst, k, 0, n); err != nil {
			return nil, fmt.Errorf("sentence %d: %w", k, err)
		}
	}
	return dst, nil
}

// sentenceMapping builds or loads the mapping for documents part of src.
func sentenceMapping(ctx context.Context, kind string, src TokenSource, part Split, split string, seed uint64, name string, cache IndexCache, spec mappingSpec) ([]int64, error) {
	lo, hi, w, err := splitRange(split, part, src.NumDocuments())
	if err != nil {
		return nil, err
	}
	var desc string
	if cache.Dir != "" {
		if name, err = sourceName(src, name); err != nil {
			return nil, err
		}
		var b strings.Builder
		fmt.Fprintf(&b, "megago %s sentence mapping v2\nname: %s\nsequences: %d\ndocuments: %d\n", kind, name, src.NumSequences(), src.NumDocuments())
		fmt.Fprintf(&b, "content: %s\n", sourceDigest(src))
		fmt.Fprintf(&b, "split: %s,%s,%s\npart: %v [%d, %d)\nseed: %d\n", fmtFloat(w[0]), fmtFloat(w[1]), fmtFloat(w[2]), part, lo, hi, seed)
		fmt.Fprintf(&b, "max tokens: %d\nshort sequence probability: %s\nmin sentences: %d\nsamples: %d\n",
			spec.maxTokens, fmtFloat(spec.shortSeqProb), spec.minSentences, spec.numSamples)
		desc = b.String()
	}
	arrays, path, _, err := cache.loadOrBuild(ctx, kind, desc, func() ([][]int64, error) {
		rows, err := buildSentenceMapping(src, lo, hi, spec, newRNG(seed, "sentence-mapping", 0))
		return [][]int64{rows}, err
	})
	if err != nil {
		return nil, fmt.Errorf("data: %s %v sample mapping: %w", kind, part, err)
	}
	if len(arrays) != 1 || len(arrays[0])%3 != 0 {
		return nil, fmt.Errorf("data: %s %v sample mapping from %s: malformed", kind, part, path)
	}
	rows := arrays[0]
	for i := 0; i < len(rows); i += 3 {
		if rows[i] < 0 || rows[i] >= rows[i+1] || rows[i+1] > int64(src.NumSequences()) || rows[i+2] < 1 || rows[i+2] > int64(spec.maxTokens) {
			return nil, fmt.Errorf("data: %s %v sample mapping from %s: row %d out of range", kind, part, path, i/3)
		}
	}
	return rows, nil
}
