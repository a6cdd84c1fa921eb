package data

import "fmt"

// The GPT indices (Megatron's gpt_dataset.py and helpers.cpp). The split's documents,
// repeated over E epochs and shuffled, form the document index; reading the documents
// in that order gives one stream of E·tokensPerEpoch tokens. Sample k is stream
// positions [k·s, k·s + s]: s+1 tokens, the last of which is also the first of sample
// k+1. The sample index stores where each sample starts as (position in the document
// index, offset in that document); the shuffle index permutes the samples.

// lastEpochThreshold is Megatron's rule: when the last epoch would contribute fewer than
// this fraction of an epoch's samples, it is shuffled apart from the others.
const lastEpochThreshold = 0.80

// gptEpochs returns the number of epochs E, the smallest with
// E·tokensPerEpoch ≥ numSamples·seqLen + 1 (one epoch when numSamples ≤ 0), and whether
// the last epoch is shuffled separately: E > 1 and the samples that need it,
// numSamples − ⌊((E−1)·tokensPerEpoch − 1)/seqLen⌋, are fewer than
// ⌊0.8·⌊(tokensPerEpoch − 1)/seqLen⌋⌋. It panics unless tokensPerEpoch and seqLen are
// positive.
func gptEpochs(tokensPerEpoch, seqLen, numSamples int) (epochs int, separateLast bool) {
	if tokensPerEpoch <= 0 || seqLen <= 0 {
		panic(fmt.Sprintf("data: gptEpochs(%d, %d, %d)", tokensPerEpoch, seqLen, numSamples))
	}
	if numSamples <= 0 {
		return 1, false
	}
	need := numSamples*seqLen + 1
	epochs = (need + tokensPerEpoch - 1) / tokensPerEpoch
	if epochs == 1 {
		return 1, false
	}
	beforeLast := ((epochs-1)*tokensPerEpoch - 1) / seqLen
	fromLast := numSamples - beforeLast
	perEpoch := (tokensPerEpoch - 1) / seqLen
	return epochs, fromLast < int(lastEpochThreshold*float64(perEpoch))
}

// buildDocumentIndex returns the documents lo..hi−1 repeated epochs times and shuffled:
// all together, or, with separateLast, the first epochs−1 repetitions together and the
// last one after them, shuffled on its own.
func buildDocumentIndex(lo, hi, epochs int, separateLast bool, r *rng) []int64 {
	n := hi - lo
	idx := make([]int64, 0, n*epochs)
	for range epochs {
		for d := lo; d < hi; d++ {
			idx = append(idx, int64(d))
		}
	}
	if separateLast && epochs > 1 {
		r.shuffle(idx[:n*(epochs-1)])
		r.shuffle(idx[n*(epochs-1):])
	} else {
		r.shuffle(idx)
	}
	return idx
}

// buildSampleIndex returns the sample index for documents read in the order docIndex,
// sizes[d] being document d's length: N+1 rows (position in docIndex, offset),
// flattened, where N = ⌊(Σ sizes over docIndex − 1)/seqLen⌋. Row k is where sample k
// starts and row k+1 where it ends (that token included). A sample that ends exactly at
// a document's end stops at offset len−1 of that document, and the next starts there.
// It panics if seqLen ≤ 0.
func buildSampleIndex(sizes func(doc int64) int, docIndex []int64, seqLen int) []int64 {
	if seqLen <= 0 {
		panic(fmt.Sprintf("data: buildSampleIndex: seqLen %d", seqLen))
	}
	total := 0
	for _, d := range docIndex {
		total += sizes(d)
	}
	n := 0
	if total > 0 {
		n = (total - 1) / seqLen
	}
	idx := make([]int64, 0, 2*(n+1))
	idx = append(idx, 0, 0)
	pos, off := 0, 0
	for range n {
		remaining := seqLen + 1
		for remaining != 0 {
			docLen := sizes(docIndex[pos]) - off
			remaining -= docLen
			if remaining <= 0 {
				off += remaining + docLen - 1 // back up one: the shared token
				remaining = 0
			} else {
				pos++
				off = 0
			}
		}
		idx = append(idx, int64(pos), int64(off))
	}
	return idx
}

// buildShuffleIndex returns a permutation of 0..total−1 that shuffles [0, first) and
// [first, total) separately, keeping the second part last.
func buildShuffleIndex(first, total int, r *rng) []int64 {
	idx := make([]int64, total)
	for i := range idx {
		idx[i] = int64(i)
	}
	r.shuffle(idx[:first])
	r.shuffle(idx[first:])
	return idx
}
