package data

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

func init() {
	tokenizerTypes["GPT2BPETokenizer"] = func(c TokenizerConfig) (Tokenizer, error) {
		return LoadGPT2BPE(c.VocabFile, c.MergeFile)
	}
	tokenizerTypes["gpt2"] = func(TokenizerConfig) (Tokenizer, error) { return BuiltinGPT2(), nil }
}

// GPT2BPE is GPT-2's byte-level BPE tokenizer (Megatron's GPT2BPETokenizer). Encoding
// cuts text into words with GPT-2's pre-tokenizer, starts each word as its UTF-8 bytes,
// and applies merges as GPT-2's encoder.py does: repeatedly, the adjacent pair with the
// lowest merge rank merges everywhere in the word. Text is encoded literally:
// "<|endoftext|>" in the text is not the EOD token, as in Megatron.
//
// A GPT2BPE is immutable and safe for concurrent use; encoded words are cached (the cache
// is emptied when it reaches 1<<18 words).
type GPT2BPE struct {
	pieces []string   // [V] the raw bytes each id stands for
	byteID [256]int32 // id of each single byte
	rules  bpeRules
	merges [][2]int32 // merges in rank order: the ids of the pair
	eod    int32
	cache  wordCache
}

// gpt2EOD is the text of GPT-2's end-of-document token.
const gpt2EOD = "<|endoftext|>"

// newGPT2BPE builds a GPT2BPE from the raw bytes of each id and the merges in rank order
// (as pairs of ids). Every single byte must be a piece; each merge's result is the id
// whose piece is the concatenation (the first such id when pieces repeat).
func newGPT2BPE(pieces []string, merges [][2]int32, eod int32) (*GPT2BPE, error) {
	t := &GPT2BPE{pieces: pieces, merges: merges, eod: eod, rules: make(bpeRules, len(merges))}
	idOf := make(map[string]int32, len(pieces))
	for id, p := range pieces {
		if _, dup := idOf[p]; !dup && int32(id) != eod {
			idOf[p] = int32(id)
		}
	}
	for b := range 256 {
		id, ok := idOf[string([]byte{byte(b)})]
		if !ok {
			return nil, fmt.Errorf("no token for the byte 0x%02x (%q)", b, string(gpt2ByteChars[b]))
		}
		t.byteID[b] = id
	}
	for rank, m := range merges {
		joined := pieces[m[0]] + pieces[m[1]]
		id, ok := idOf[joined]
		if !ok {
			return nil, fmt.Errorf("merge %d (%q %q): %q is not in the vocabulary", rank,
				gpt2EncodeBytes(pieces[m[0]]), gpt2EncodeBytes(pieces[m[1]]), gpt2EncodeBytes(joined))
		}
		// A repeated pair takes its last rank, as Python's dict(zip(merges, ranks)) does.
		t.rules[pairKey(m[0], m[1])] = bpeMerge{rank: int32(rank), id: id}
	}
	return t, nil
}

// LoadGPT2BPE reads a GPT-2 vocabulary: vocab.json (token → id, tokens written in GPT-2's
// byte characters, ids 0..V-1 each used once, "<|endoftext|>" among them) and merges.txt
// (one merge "left right" per line in rank order, after an optional "#version" line).
// Errors name the file and line.
func LoadGPT2BPE(vocabFile, mergesFile string) (*GPT2BPE, error) {
	vf, err := os.Open(vocabFile)
	if err != nil {
		return nil, fmt.Errorf("data: GPT-2 vocabulary: %w", err)
	}
	defer vf.Close()
	mf, err := os.Open(mergesFile)
	if err != nil {
		return nil, fmt.Errorf("data: GPT-2 merges: %w", err)
	}
	defer mf.Close()
	t, err := ReadGPT2BPE(vf, mf)
	if err != nil {
		return nil, fmt.Errorf("data: GPT-2 BPE from %s and %s: %w", vocabFile, mergesFile, err)
	}
	return t, nil
}

// ReadGPT2BPE is LoadGPT2BPE reading from vocab (vocab.json) and merges (merges.txt).
func ReadGPT2BPE(vocab, merges io.Reader) (*GPT2BPE, error) {
	var enc map[string]int32
	if err := json.NewDecoder(vocab).Decode(&enc); err != nil {
		return nil, fmt.Errorf("vocab.json: %w", err)
	}
	pieces := make([]string, len(enc))
	seen := make([]bool, len(enc))
	for tok, id := range enc {
		if id < 0 || int(id) >= len(enc) || seen[id] {
			return nil, fmt.Errorf("vocab.json: token %q has id %d; ids must be 0..%d, each once", tok, id, len(enc)-1)
		}
		seen[id] = true
		pieces[id] = gpt2DecodeChars(tok)
	}
	eod, ok := enc[gpt2EOD]
	if !ok {
		return nil, fmt.Errorf("vocab.json: no %s token", gpt2EOD)
	}
	var pairs [][2]int32
	sc := bufio.NewScanner(merges)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if line == 1 && strings.HasPrefix(text, "#version") || strings.TrimSpace(text) == "" {
			continue
		}
		f := strings.Fields(text)
		if len(f) != 2 {
			return nil, fmt.Errorf("merges.txt line %d: %q is not two tokens", line, text)
		}
		a, okA := enc[f[0]]
		b, okB := enc[f[1]]
		if !okA || !okB {
			return nil, fmt.Errorf("merges.txt line %d: %q: token not in vocab.json", line, text)
		}
		pairs = append(pairs, [2]int32{a, b})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("merges.txt: %w", err)
	}
	t, err := newGPT2BPE(pieces, pairs, eod)
	if err != nil {
		return nil, fmt.Errorf("vocab.json and merges.txt: %w", err)
	}
	return t, nil
}

// Encode returns the ids of text.
func (t *GPT2BPE) Encode(text string) []int32 {
	var ids []int32
	gpt2Split(text, func(w string) { ids = t.appendWord(ids, w) })
	return ids
}

// appendWord appends the ids of one pre-tokenized word.
func (t *GPT2BPE) appendWord(dst []int32, w string) []int32 {
	if ids, ok := t.cache.get(w); ok {
		return append(dst, ids...)
	}
	syms := make([]int32, len(w))
	for i := range len(w) {
		syms[i] = t.byteID[w[i]]
	}
	syms = t.rules.merge(syms)
	t.cache.put(w, syms)
	return append(dst, syms...)
}

// Decode returns the bytes the ids stand for, concatenated. The result is not valid UTF-8
// where ids split a character (Megatron's decode would write U+FFFD there; apply
// strings.ToValidUTF8 for that). It panics if an id is outside [0, VocabSize).
func (t *GPT2BPE) Decode(ids []int32) string { return joinPieces("GPT2BPE", t.pieces, ids) }

// joinPieces returns the pieces of ids concatenated; it panics, naming the tokenizer, if
// an id is outside [0, len(pieces)).
func joinPieces(tokenizer string, pieces []string, ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		if id < 0 || int(id) >= len(pieces) {
			panic(fmt.Sprintf("data: %s.Decode: id %d outside [0, %d)", tokenizer, id, len(pieces)))
		}
		b.WriteString(pieces[id])
	}
	return b.String()
}

// VocabSize returns the number of ids, "<|endoftext|>" included (50257 for GPT-2).
func (t *GPT2BPE) VocabSize() int { return len(t.pieces) }

// Special returns EOD = EOS = the id of "<|endoftext|>", as Megatron's GPT2BPETokenizer.
func (t *GPT2BPE) Special() SpecialIDs {
	s := NoSpecial()
	s.EOD, s.EOS = t.eod, t.eod
	return s
}

// NumMerges returns the number of merge rules.
func (t *GPT2BPE) NumMerges() int { return len(t.merges) }

// wordCache maps a pre-tokenized word to its ids. It is emptied when it reaches
// wordCacheMax words, which bounds its memory on an endless stream of new words; words
// longer than wordCacheLenMax bytes are not cached.
type wordCache struct {
	m sync.Map // string → []int32, never modified once stored
	n atomic.Int64
}

const wordCacheMax = 1 << 18

// wordCacheLenMax is the longest word (bytes) whose ids are cached.
const wordCacheLenMax = 1024

func (c *wordCache) get(w string) ([]int32, bool) {
	if len(w) > wordCacheLenMax {
		return nil, false
	}
	v, ok := c.m.Load(w)
	if !ok {
		return nil, false
	}
	return v.([]int32), true
}

func (c *wordCache) put(w string, ids []int32) {
	if len(w) > wordCacheLenMax {
		return
	}
	if c.n.Add(1) > wordCacheMax {
		c.m.Clear()
		c.n.Store(0)
	}
	c.m.Store(strings.Clone(w), ids) // w is a slice of the caller's text
}
