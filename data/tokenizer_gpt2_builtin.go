package data

import (
	"fmt"
	"sync"

	"github.com/tiktoken-go/tokenizer/codec"
)

// gpt2Vocab is the size of GPT-2's vocabulary: 256 bytes, 50000 merges, "<|endoftext|>".
const gpt2Vocab = 50257

// BuiltinGPT2 returns GPT-2's tokenizer (the "gpt2" tokenizer type), needing no files. Its
// vocabulary comes from github.com/tiktoken-go/tokenizer's r50k_base encoding, whose ranks
// are GPT-2's ids; the merges are recovered from the ranks: token k's merge is the pair
// that BPE with the merges of tokens below k leaves its bytes as, and its rank is its
// order among the multi-byte tokens (token 256 is merge 0). With these, GPT-2's
// merge-by-rank algorithm and tiktoken's lowest-rank-concatenation algorithm agree, which
// the tests check. VocabSize is 50257 and EOD is 50256.
//
// The first call takes about a tenth of a second; later calls return the same tokenizer.
// It panics if the embedded ranks do not form a BPE vocabulary, which the tests rule out.
func BuiltinGPT2() *GPT2BPE {
	t, err := builtinGPT2()
	if err != nil {
		panic("data: BuiltinGPT2: " + err.Error())
	}
	return t
}

var builtinGPT2 = sync.OnceValues(func() (*GPT2BPE, error) {
	enc := codec.NewR50kBase()
	pieces := make([]string, gpt2Vocab)
	for id := range gpt2Vocab - 1 {
		s, err := enc.Decode([]uint{uint(id)})
		if err != nil {
			return nil, fmt.Errorf("r50k_base rank %d: %w", id, err)
		}
		pieces[id] = s
	}
	pieces[gpt2Vocab-1] = gpt2EOD
	merges, err := mergesFromRanks(pieces[:gpt2Vocab-1])
	if err != nil {
		return nil, fmt.Errorf("r50k_base: %w", err)
	}
	return newGPT2BPE(pieces, merges, gpt2Vocab-1)
})

// mergesFromRanks recovers BPE merges from a rank-ordered list of byte strings in which
// every single byte appears: in rank order, each longer token must be what BPE with the
// merges recovered so far reduces its bytes to, two tokens.
func mergesFromRanks(pieces []string) ([][2]int32, error) {
	var byteID [256]int32
	var haveByte [256]bool
	for id, p := range pieces {
		if len(p) == 1 && !haveByte[p[0]] {
			byteID[p[0]], haveByte[p[0]] = int32(id), true
		}
	}
	for b, ok := range haveByte {
		if !ok {
			return nil, fmt.Errorf("no token for the byte 0x%02x", b)
		}
	}
	rules := make(bpeRules, len(pieces))
	var merges [][2]int32
	for id, p := range pieces {
		if len(p) < 2 {
			continue
		}
		syms := make([]int32, len(p))
		for i := range len(p) {
			syms[i] = byteID[p[i]]
		}
		syms = rules.merge(syms)
		if len(syms) != 2 {
			return nil, fmt.Errorf("token %d %q: lower-ranked merges leave %d parts, not 2", id, p, len(syms))
		}
		rules[pairKey(syms[0], syms[1])] = bpeMerge{rank: int32(len(merges)), id: int32(id)}
		merges = append(merges, [2]int32{syms[0], syms[1]})
	}
	return merges, nil
}
