package data

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"megago/internal/atomicfile"
)

// BPETrainer learns a byte-level BPE vocabulary in GPT-2's format from text, for users
// without vocabulary files. Add text (documents, files), then Train.
//
// Training cuts the text into words with GPT-2's pre-tokenizer, starts each distinct word
// as its bytes, and repeatedly merges the most frequent adjacent pair of tokens (counted
// over word occurrences) into a new token, merging every occurrence left to right as
// GPT-2's encoder will. Ties go to the pair with the smaller left id, then the smaller
// right id, so training is deterministic. Ids: 0..255 are the bytes in GPT-2's order (so
// they equal GPT-2's byte ids), then one id per new token in order of creation, then
// "<|endoftext|>" last. A merge whose result is already a token (two merge paths to the
// same bytes) reuses that token's id; such merges are in merges.txt without a new id.
// Pair counts are updated incrementally, touching only the words that hold the merged
// pair: 8k tokens from a few MB of text take seconds.
//
// A BPETrainer is not safe for concurrent use.
type BPETrainer struct {
	words map[string]int64 // word → number of occurrences
}

// NewBPETrainer returns a trainer with no text.
func NewBPETrainer() *BPETrainer { return &BPETrainer{words: make(map[string]int64)} }

// Add counts the words of text. Words never cross calls: add documents one at a time.
func (tr *BPETrainer) Add(text string) {
	gpt2Split(text, func(w string) {
		if _, ok := tr.words[w]; !ok {
			w = strings.Clone(w) // the key must not keep text alive
		}
		tr.words[w]++
	})
}

// TrainBPE reads all of r as one text and trains a vocabulary of vocabSize ids on it (see
// BPETrainer).
func TrainBPE(r io.Reader, vocabSize int) (*GPT2BPE, error) {
	text, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("data: TrainBPE: reading the corpus: %w", err)
	}
	tr := NewBPETrainer()
	tr.Add(string(text))
	return tr.Train(vocabSize)
}

// trainPair is a heap entry: a pair of ids and its count when pushed.
type trainPair struct {
	count int64
	a, b  int32
}

// Train learns merges until the vocabulary has vocabSize ids ("<|endoftext|>" included)
// or no adjacent pair is left, whichever comes first; VocabSize of the result may then be
// smaller. vocabSize must be at least 257 (the 256 bytes and "<|endoftext|>").
func (tr *BPETrainer) Train(vocabSize int) (*GPT2BPE, error) {
	if vocabSize < 257 {
		return nil, fmt.Errorf("data: BPETrainer.Train: vocabulary size %d < 257 (256 bytes + <|endoftext|>)", vocabSize)
	}
	words := slices.Sorted(func(yield func(string) bool) {
		for w := range tr.words {
			if !yield(w) {
				return
			}
		}
	})
	pieces := make([]string, 256, vocabSize)
	pieceID := make(map[string]int32, vocabSize)
	var byteID [256]int32
	for k, b := range gpt2ByteOrder {
		pieces[k] = string([]byte{b})
		pieceID[pieces[k]] = int32(k)
		byteID[b] = int32(k)
	}
	st := newTrainState(words, tr.words, byteID)
	var merges [][2]int32
	for len(pieces) < vocabSize-1 && st.heap.len() > 0 {
		top := st.heap.pop()
		p := pairKey(top.a, top.b)
		if top.count != st.counts[p] {
			continue // stale: the count changed after this entry was pushed
		}
		joined := pieces[top.a] + pieces[top.b]
		id, ok := pieceID[joined]
		if !ok {
			id = int32(len(pieces))
			pieces = append(pieces, joined)
			pieceID[joined] = id
		}
		merges = append(merges, [2]int32{top.a, top.b})
		st.apply(top.a, top.b, id, int32(len(merges)))
	}
	pieces = append(pieces, gpt2EOD)
	return newGPT2BPE(pieces, merges, int32(len(pieces)-1))
}

// trainState holds the words as token sequences and the pair counts.
type trainState struct {
	syms   [][]int32          // each distinct word as ids
	freq   []int64            // occurrences of each word
	counts map[uint64]int64   // pair → occurrences over all words
	where  map[uint64][]int32 // pair → words that may hold it (stale entries allowed)
	seen   []int32            // last merge step that visited each word
	delta  map[uint64]int64   // scratch: count changes of one merge
	heap   *binHeap[trainPair]
}

func newTrainState(words []string, freq map[string]int64, byteID [256]int32) *trainState {
	st := &trainState{
		syms: make([][]int32, len(words)), freq: make([]int64, len(words)),
		counts: make(map[uint64]int64), where: make(map[uint64][]int32),
		seen: make([]int32, len(words)), delta: make(map[uint64]int64),
		heap: &binHeap[trainPair]{less: func(x, y trainPair) bool {
			if x.count != y.count {
				return x.count > y.count
			}
			if x.a != y.a {
				return x.a < y.a
			}
			return x.b < y.b
		}},
	}
	for w, word := range words {
		s := make([]int32, len(word))
		for i := range len(word) {
			s[i] = byteID[word[i]]
		}
		st.syms[w], st.freq[w] = s, freq[word]
		for i := 0; i+1 < len(s); i++ {
			p := pairKey(s[i], s[i+1])
			st.counts[p] += st.freq[w]
			st.addWhere(p, int32(w))
		}
	}
	for p, c := range st.counts {
		st.heap.push(trainPair{c, int32(p >> 32), int32(uint32(p))})
	}
	return st
}

func (st *trainState) addWhere(p uint64, w int32) {
	if l := st.where[p]; len(l) == 0 || l[len(l)-1] != w {
		st.where[p] = append(l, w)
	}
}

// apply merges (a, b) into id in every word that holds the pair and updates the counts.
func (st *trainState) apply(a, b, id, step int32) {
	p := pairKey(a, b)
	for _, w := range st.where[p] {
		if st.seen[w] == step {
			continue
		}
		st.seen[w] = step
		s, f := st.syms[w], st.freq[w]
		for i := 0; i+1 < len(s); i++ {
			st.delta[pairKey(s[i], s[i+1])] -= f
		}
		out := s[:0] // in place: the write index never passes the read index
		for i := 0; i < len(s); {
			if i+1 < len(s) && s[i] == a && s[i+1] == b {
				out = append(out, id)
				i += 2
			} else {
				out = append(out, s[i])
				i++
			}
		}
		st.syms[w] = out
		for i := 0; i+1 < len(out); i++ {
			q := pairKey(out[i], out[i+1])
			st.delta[q] += f
			if out[i] == id || out[i+1] == id {
				st.addWhere(q, w)
			}
		}
	}
	for q, d := range st.delta {
		if d == 0 {
			continue
		}
		c := st.counts[q] + d
		if c > 0 {
			st.counts[q] = c
			st.heap.push(trainPair{c, int32(q >> 32), int32(uint32(q))})
		} else {
			delete(st.counts, q)
		}
	}
	clear(st.delta)
	delete(st.where, p)
}

// WriteVocab writes vocab.json: each token in GPT-2's byte characters with its id, in id
// order, one per line.
func (t *GPT2BPE) WriteVocab(w io.Writer) error {
	bw := bufio.NewWriter(w)
	var key bytes.Buffer
	enc := json.NewEncoder(&key)
	enc.SetEscapeHTML(false)
	bw.WriteString("{\n")
	for id, p := range t.pieces {
		key.Reset()
		if err := enc.Encode(gpt2EncodeBytes(p)); err != nil {
			return err
		}
		sep := ",\n"
		if id == len(t.pieces)-1 {
			sep = "\n"
		}
		fmt.Fprintf(bw, "  %s: %d%s", bytes.TrimSpace(key.Bytes()), id, sep)
	}
	bw.WriteString("}\n")
	return bw.Flush()
}

// WriteMerges writes merges.txt: a "#version: 0.2" line, then one merge a line in rank
// order, its two tokens in GPT-2's byte characters separated by a space.
func (t *GPT2BPE) WriteMerges(w io.Writer) error {
	bw := bufio.NewWriter(w)
	bw.WriteString("#version: 0.2\n")
	for _, m := range t.merges {
		bw.WriteString(gpt2EncodeBytes(t.pieces[m[0]]))
		bw.WriteByte(' ')
		bw.WriteString(gpt2EncodeBytes(t.pieces[m[1]]))
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// WriteFiles writes vocab.json and merges.txt to the given paths, which LoadGPT2BPE and
// Megatron's GPT2BPETokenizer read, each atomically (package atomicfile).
func (t *GPT2BPE) WriteFiles(vocabFile, mergesFile string) error {
	for _, f := range []struct {
		path  string
		write func(io.Writer) error
	}{{vocabFile, t.WriteVocab}, {mergesFile, t.WriteMerges}} {
		if err := atomicfile.Write(f.path, f.write); err != nil {
			return fmt.Errorf("data: writing %s: %w", f.path, err)
		}
	}
	return nil
}
