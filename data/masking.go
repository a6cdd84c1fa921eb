package data

import "math"

// Masking (Megatron's create_masked_lm_predictions, shared by BERT and T5). Tokens are
// grouped into whole words: a token continues the word before it when the caller's
// isContinuation says so (WordPiece "##" pieces) and it directly follows that word.
// The number of tokens to mask is max(1, round(prob·len(tokens))) (round half to even;
// len counts special tokens too). Candidate n-grams of whole words start at each word, in
// a shuffled order; each start draws a length n (BERT: P(n) ∝ 1/n for n = 1..maxNgram;
// T5: n ~ Geometric(p) clipped to maxNgram), shortened while the n-gram would exceed the
// budget, skipped if it still does or if it overlaps an earlier span. Spans therefore
// cover whole words, never special tokens, and never overlap.

// maskSpec configures chooseSpans.
type maskSpec struct {
	prob           float64          // fraction of tokens to mask
	maxNgram       int              // longest span, in words
	geometricP     float64          // > 0: span lengths Geometric(p) (T5); 0: P(n) ∝ 1/n (BERT)
	isContinuation func(int32) bool // nil: every token is a word
	maxSpans       int              // > 0: at most this many spans (T5 sentinels)
	maxCost        int              // > 0: masked tokens + spans ≤ maxCost (T5 decoder room)
}

// wholeWords groups the positions i with maskable(i) into words.
func wholeWords(tokens []int32, maskable func(i int) bool, isContinuation func(int32) bool) [][]int {
	var words [][]int
	for i, t := range tokens {
		if !maskable(i) {
			continue
		}
		if n := len(words); n > 0 && isContinuation != nil && isContinuation(t) && words[n-1][len(words[n-1])-1] == i-1 {
			words[n-1] = append(words[n-1], i)
			continue
		}
		words = append(words, []int{i})
	}
	return words
}

// numToPredict is the masking budget for a sequence of n tokens.
func numToPredict(n int, prob float64) int {
	return max(1, int(math.RoundToEven(float64(n)*prob)))
}

// chooseSpans returns the spans to mask, in the order chosen; each span lists its
// positions in increasing order.
func chooseSpans(tokens []int32, maskable func(i int) bool, spec maskSpec, r *rng) [][]int {
	words := wholeWords(tokens, maskable, spec.isContinuation)
	if len(words) == 0 {
		return nil
	}
	budget := numToPredict(len(tokens), spec.prob)
	order := make([]int64, len(words))
	for i := range order {
		order[i] = int64(i)
	}
	r.shuffle(order)
	covered := make([]bool, len(words))
	masked := 0
	var spans [][]int
	size := func(start, n int) int {
		k := 0
		for _, w := range words[start : start+n] {
			k += len(w)
		}
		return k
	}
	fits := func(k int) bool {
		return masked+k <= budget &&
			(spec.maxSpans <= 0 || len(spans) < spec.maxSpans) &&
			(spec.maxCost <= 0 || masked+k+len(spans)+1 <= spec.maxCost)
	}
	for _, o := range order {
		if masked >= budget {
			break
		}
		start := int(o)
		n := spec.drawSpan(min(spec.maxNgram, len(words)-start), r)
		for n > 1 && !fits(size(start, n)) {
			n--
		}
		if !fits(size(start, n)) {
			continue
		}
		overlap := false
		for _, c := range covered[start : start+n] {
			overlap = overlap || c
		}
		if overlap {
			continue
		}
		var span []int
		for j := start; j < start+n; j++ {
			covered[j] = true
			span = append(span, words[j]...)
		}
		masked += len(span)
		spans = append(spans, span)
	}
	return spans
}

// drawSpan draws a span length in [1, avail] words.
func (s maskSpec) drawSpan(avail int, r *rng) int {
	if s.geometricP > 0 {
		return min(r.geometric(s.geometricP), avail)
	}
	sum := 0.0
	for n := 1; n <= avail; n++ {
		sum += 1 / float64(n)
	}
	u := r.float64() * sum
	for n := 1; n < avail; n++ {
		if u -= 1 / float64(n); u < 0 {
			return n
		}
	}
	return avail
}

// applyBERTMask replaces the positions of spans in tokens, each independently: with
// probability 0.8 by mask, else with probability 0.5 kept, else by a uniform id in
// [0, vocab). It sets labels at those positions to the original token.
func applyBERTMask(tokens, labels []int32, spans [][]int, mask int32, vocab int, r *rng) {
	for _, span := range spans {
		for _, i := range span {
			labels[i] = tokens[i]
			switch {
			case r.float64() < 0.8:
				tokens[i] = mask
			case r.float64() < 0.5:
			default:
				tokens[i] = int32(r.intn(vocab))
			}
		}
	}
}
