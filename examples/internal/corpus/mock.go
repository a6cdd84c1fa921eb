package corpus

import (
	"fmt"
	"math/rand/v2"
)

// Mock is Megatron's MockGPTLowLevelDataset, the documents of --mock-data: documents of
// one sequence each, of lengths drawn uniformly from [1, MockMaxLength) (seed 0),
// document i holding the ids 1, 2, ..., L_i − 1 and then EOD. The lengths come from Go's
// PCG generator rather than NumPy's, so they are Megatron's in distribution, not one by
// one; ids wrap below the vocabulary when it has fewer than MockMaxLength ids. Nothing is
// read or written: the tokens are computed when read.
type Mock struct {
	lengths []int32
	vocab   int32 // ids 1 … vocab−1 (then 1 again); vocab ≥ 2
	eod     int32
}

// Megatron's MockGPTLowLevelDataset sizes: MockDocuments documents of fewer than
// MockMaxLength tokens.
const (
	MockDocuments = 100_000
	MockMaxLength = 4096
)

// NewMock returns docs mock documents (Megatron has MockDocuments; the first docs of
// them are the same whatever docs is) for a vocabulary of vocab ids whose
// end-of-document id is eod. It panics if docs < 1, vocab < 2 or eod is outside it.
func NewMock(docs, vocab int, eod int32) *Mock {
	if docs < 1 || vocab < 2 || eod < 0 || int(eod) >= vocab {
		panic(fmt.Sprintf("corpus: NewMock: %d documents, vocab %d, eod %d", docs, vocab, eod))
	}
	r := rand.New(rand.NewPCG(0, 0))
	m := &Mock{lengths: make([]int32, docs), vocab: int32(vocab), eod: eod}
	for i := range m.lengths {
		m.lengths[i] = 1 + r.Int32N(MockMaxLength-1)
	}
	return m
}

// NumSequences returns the number of documents.
func (m *Mock) NumSequences() int { return len(m.lengths) }

// SequenceLen returns the length of document i.
func (m *Mock) SequenceLen(i int) int { return int(m.lengths[i]) }

// token returns id k of document i.
func (m *Mock) token(i, k int) int32 {
	if k == int(m.lengths[i])-1 {
		return m.eod
	}
	return 1 + int32(k)%(m.vocab-1)
}

// AppendTokens appends ids [offset, offset+n) of document i to dst. It panics if the
// range is outside the document.
func (m *Mock) AppendTokens(dst []int32, i, offset, n int) []int32 {
	if offset < 0 || n < 0 || offset+n > int(m.lengths[i]) {
		panic(fmt.Sprintf("corpus: Mock: ids [%d, %d) of document %d of %d", offset, offset+n, i, m.lengths[i]))
	}
	for k := offset; k < offset+n; k++ {
		dst = append(dst, m.token(i, k))
	}
	return dst
}

// ReadTokens is AppendTokens; it never returns an error.
func (m *Mock) ReadTokens(dst []int32, i, offset, n int) ([]int32, error) {
	return m.AppendTokens(dst, i, offset, n), nil
}

// NumDocuments returns the number of documents: one sequence each.
func (m *Mock) NumDocuments() int { return len(m.lengths) }

// Document returns [j, j+1).
func (m *Mock) Document(j int) (start, end int) { return j, j + 1 }

// Unigram returns the token counts of documents [first, last), from their lengths: id
// k+1 (k below the vocabulary) appears once in each document longer than k+1, EOD once
// in each.
func (m *Mock) Unigram(first, last int) Unigram {
	longer := make([]int64, MockMaxLength+1) // documents of each length
	for _, l := range m.lengths[first:last] {
		longer[l]++
	}
	for l := MockMaxLength - 1; l >= 0; l-- { // now: documents of length ≥ l
		longer[l] += longer[l+1]
	}
	u := Unigram{Counts: make([]int64, m.vocab)}
	for k := 0; k+1 < MockMaxLength; k++ { // position k holds an id when the length exceeds k+1
		u.Counts[1+int32(k)%(m.vocab-1)] += longer[k+2]
		u.Total += longer[k+2]
	}
	u.Counts[m.eod] += int64(last - first)
	u.Total += int64(last - first)
	return u
}
