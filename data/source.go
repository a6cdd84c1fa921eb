package data

// TokenSource is what the GPT, BERT and T5 datasets read: sequences of token ids grouped
// into documents. IndexedDataset implements it; tests use in-memory sources.
type TokenSource interface {
	// NumSequences returns the number of sequences.
	NumSequences() int
	// SequenceLen returns the number of tokens of sequence i.
	SequenceLen(i int) int
	// ReadTokens appends tokens [offset, offset+n) of sequence i to dst and returns it,
	// or an error naming the source and offset when they cannot be read (an I/O error).
	// It panics if the range is outside the sequence. The datasets read through it.
	ReadTokens(dst []int32, i, offset, n int) ([]int32, error)
	// AppendTokens is ReadTokens for callers that cannot handle an error: it panics
	// where ReadTokens returns one.
	AppendTokens(dst []int32, i, offset, n int) []int32
	// NumDocuments returns the number of documents.
	NumDocuments() int
	// Document returns the sequences [start, end) of document j.
	Document(j int) (start, end int)
}

// MemorySource is a TokenSource held in memory: each sequence is its own document unless
// Docs gives document boundaries (Megatron's document index: [0, ..., len(Seqs)]).
type MemorySource struct {
	Seqs [][]int32
	Docs []int
}

// NumSequences returns len(Seqs).
func (m *MemorySource) NumSequences() int { return len(m.Seqs) }

// SequenceLen returns len(Seqs[i]).
func (m *MemorySource) SequenceLen(i int) int { return len(m.Seqs[i]) }

// AppendTokens appends Seqs[i][offset:offset+n] to dst.
func (m *MemorySource) AppendTokens(dst []int32, i, offset, n int) []int32 {
	return append(dst, m.Seqs[i][offset:offset+n]...)
}

// ReadTokens is AppendTokens; it never returns an error.
func (m *MemorySource) ReadTokens(dst []int32, i, offset, n int) ([]int32, error) {
	return m.AppendTokens(dst, i, offset, n), nil
}

// NumDocuments returns the number of documents.
func (m *MemorySource) NumDocuments() int {
	if m.Docs == nil {
		return len(m.Seqs)
	}
	return len(m.Docs) - 1
}

// Document returns document j's sequences.
func (m *MemorySource) Document(j int) (start, end int) {
	if m.Docs == nil {
		return j, j + 1
	}
	return m.Docs[j], m.Docs[j+1]
}

// must returns s, or panics with err's message.
func must[S any](s S, err error) S {
	if err != nil {
		panic(err.Error())
	}
	return s
}
