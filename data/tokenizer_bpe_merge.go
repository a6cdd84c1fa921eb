package data

// This file applies BPE merges to one word. bpeMergeSimple is GPT-2's encoder.py loop
// written with ids; bpeMergeHeap gives the same result in O(n log n) for long words and is
// tested against it.

// bpeMerge is one merge rule: the pair merges with priority rank (lower first) into id.
type bpeMerge struct{ rank, id int32 }

// bpeRules maps a pair of adjacent ids to its merge rule.
type bpeRules map[uint64]bpeMerge

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// bpeSimpleMax is the word length (in symbols) up to which Encode uses bpeMergeSimple.
const bpeSimpleMax = 48

// merge merges syms in place as GPT-2 does and returns the merged prefix of syms.
func (rules bpeRules) merge(syms []int32) []int32 {
	if len(syms) <= bpeSimpleMax {
		return rules.mergeSimple(syms)
	}
	return rules.mergeHeap(syms)
}

// mergeSimple is GPT-2's bpe(): while some adjacent pair has a rule, take the pair with
// the lowest rank and merge all its occurrences in one left-to-right pass (a pair that
// overlaps one already merged in the pass is skipped: "aaa" with rule (a, a) gives
// "aa a"). It returns the merged prefix of syms.
func (rules bpeRules) mergeSimple(syms []int32) []int32 {
	for len(syms) > 1 {
		best := bpeMerge{rank: -1}
		var ba, bb int32
		for i := 0; i+1 < len(syms); i++ {
			if m, ok := rules[pairKey(syms[i], syms[i+1])]; ok && (best.rank < 0 || m.rank < best.rank) {
				best, ba, bb = m, syms[i], syms[i+1]
			}
		}
		if best.rank < 0 {
			break
		}
		out := syms[:0]
		for i := 0; i < len(syms); {
			if i+1 < len(syms) && syms[i] == ba && syms[i+1] == bb {
				out = append(out, best.id)
				i += 2
			} else {
				out = append(out, syms[i])
				i++
			}
		}
		syms = out
	}
	return syms
}

// mergeHeap is mergeSimple in O(n log n): the symbols form a linked list, and a heap holds
// (rank, position) of every mergeable adjacent pair. All entries of the lowest rank are
// one pass of mergeSimple: they pop in position order, each merges unless an earlier
// merge of the pass consumed it, and the pairs the pass creates enter the heap only after
// it, as mergeSimple would find them in its next round.
func (rules bpeRules) mergeHeap(syms []int32) []int32 {
	n := len(syms)
	next := make([]int32, n)
	prev := make([]int32, n)
	rank := make([]int32, n) // rank of the pair (i, next[i]); -1 if none or dead
	for i := range n {
		next[i], prev[i], rank[i] = int32(i+1), int32(i-1), -1
	}
	next[n-1] = -1
	h := newMergeHeap(n)
	setRank := func(i int32) {
		rank[i] = -1
		if j := next[i]; j >= 0 {
			if m, ok := rules[pairKey(syms[i], syms[j])]; ok {
				rank[i] = m.rank
				h.push(heapItem{m.rank, i})
			}
		}
	}
	for i := range n - 1 {
		setRank(int32(i))
	}
	var touched []int32
	for h.len() > 0 {
		r := h.top().rank
		touched = touched[:0]
		for h.len() > 0 && h.top().rank == r {
			it := h.pop()
			i := it.pos
			if rank[i] != r { // consumed, or its pair changed earlier in this pass
				continue
			}
			j := next[i]
			syms[i] = rules[pairKey(syms[i], syms[j])].id
			next[i] = next[j]
			if next[j] >= 0 {
				prev[next[j]] = i
			}
			rank[j], rank[i] = -1, -2 // j is gone; i waits for the end of the pass
			touched = append(touched, i)
			if p := prev[i]; p >= 0 {
				rank[p] = -2
				touched = append(touched, p)
			}
		}
		for _, i := range touched {
			if rank[i] == -2 {
				setRank(i)
			}
		}
	}
	out := syms[:0]
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, syms[i])
	}
	return out
}

type heapItem struct{ rank, pos int32 }

// mergeHeap is a binary min-heap of merge candidates ordered by rank, then position.
type mergeHeap = binHeap[heapItem]

func newMergeHeap(n int) *mergeHeap {
	return &binHeap[heapItem]{items: make([]heapItem, 0, n), less: func(a, b heapItem) bool {
		if a.rank != b.rank {
			return a.rank < b.rank
		}
		return a.pos < b.pos
	}}
}

// binHeap is a binary heap whose top is the least item under less.
type binHeap[T any] struct {
	items []T
	less  func(a, b T) bool
}

func (h *binHeap[T]) len() int { return len(h.items) }
func (h *binHeap[T]) top() T   { return h.items[0] }

func (h *binHeap[T]) push(it T) {
	h.items = append(h.items, it)
	s := h.items
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(s[i], s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *binHeap[T]) pop() T {
	s := h.items
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		c := 2*i + 1
		if c >= len(s) {
			break
		}
		if c+1 < len(s) && h.less(s[c+1], s[c]) {
			c++
		}
		if !h.less(s[c], s[i]) {
			break
		}
		s[i], s[c] = s[c], s[i]
		i = c
	}
	h.items = s
	return top
}
