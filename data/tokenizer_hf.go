package data

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unicode"
)

func init() {
	tokenizerTypes["HuggingFaceTokenizer"] = func(c TokenizerConfig) (Tokenizer, error) {
		return LoadHFTokenizer(c.TokenizerModel, !c.HFNoSpecialTokens)
	}
}

// HFTokenizer runs a Hugging Face tokenizer.json (Megatron's HuggingFaceTokenizer): added
// tokens matched in the text first, then on the text between them the normalizer, the
// pre-tokenizer and the model, and the post-processor's special tokens (Llama 3's
// <|begin_of_text|>, Llama 2's <s>, BERT's [CLS] and [SEP]) when includeSpecial. It
// covers what the GPT-2, Llama 2/3, Mistral, Qwen and BERT files use: BPE (byte-level, or
// character-level with byte_fallback, unk and fuse_unk; ignore_merges; merges as "a b" or
// ["a", "b"]) and WordPiece models; the normalizers Sequence, NFC, NFD, NFKC, NFKD,
// Lowercase, Replace (literal), Prepend, BertNormalizer; the pre-tokenizers Sequence,
// Split (the GPT-2, Llama 3 and Qwen regexes, see tokenizer_hf_split.go), ByteLevel,
// Metaspace, Digits, BertPreTokenizer; the post-processors ByteLevel, TemplateProcessing,
// BertProcessing, RobertaProcessing and Sequence; the decoders ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace,
// WordPiece and Sequence. Anything else is refused with an error naming the field.
// Added tokens are matched on the raw text, leftmost-longest, also those marked
// "normalized" (which Hugging Face matches after normalization).
//
// An HFTokenizer is immutable and safe for concurrent use.
type HFTokenizer struct {
	vocab   map[string]int32 // model vocabulary, tokens as written in tokenizer.json
	pieces  []string         // [V] the text each id decodes to ("" for unused ids)
	rules   bpeRules
	byteLvl bool       // the model's symbols are bytes written in GPT-2's byte characters
	byteID  [256]int32 // byte-level: each byte's id; byte fallback: <0xXX>'s id; -1 none
	unk     int32      // -1: none
	fuseUnk bool
	ignoreM bool         // ignore_merges: a word in the vocabulary is one token
	wp      *hfWordPiece // a WordPiece model instead of BPE

	added      []hfAddedToken
	addedFirst [256][]int // added tokens by first byte, longest first

	normalize []func(string) string
	// pretok are the pre-tokenizers: each appends to dst the words of ws; first reports
	// whether the segment starts the text.
	pretok    []func(dst, ws []string, first bool) []string
	wordBufs  sync.Pool // *[2][]string: scratch word lists
	prefix    []int32   // post-processor ids before and after
	suffix    []int32
	withSpec  bool
	stripLead int // decoder Strip/Metaspace: leading spaces removed from the text
	// decodeAdded is the decoder's step on added tokens' text (WordPiece's space), if any.
	decodeAdded func(string) string
	cleanup     bool // WordPiece decoder: wordPieceDecodeCleanup on the text

	special SpecialIDs
	cache   wordCache
}

// hfMaxVocab bounds vocabulary ids, checked before allocating.
const hfMaxVocab = 1 << 24

// LoadHFTokenizer reads dir/tokenizer.json (or dir/tokenizer.json.gz) and, if present,
// dir/tokenizer_config.json, whose bos_token, eos_token and pad_token give Special (EOD is
// the EOS token, as in Megatron). includeSpecial adds the post-processor's special tokens
// to every Encode (Megatron's default; --tokenizer-hf-no-include-special-tokens turns it
// off). Errors name the file and the field.
func LoadHFTokenizer(dir string, includeSpecial bool) (*HFTokenizer, error) {
	if dir == "" {
		return nil, errors.New("data: HuggingFaceTokenizer needs --tokenizer-model DIR (a directory with tokenizer.json)")
	}
	name := filepath.Join(dir, "tokenizer.json")
	f, err := os.Open(name)
	var r io.Reader = f
	if errors.Is(err, os.ErrNotExist) {
		if f, err = os.Open(name + ".gz"); err == nil {
			name += ".gz"
			if r, err = gzip.NewReader(f); err != nil {
				f.Close()
				return nil, fmt.Errorf("data: %s: %w", name, err)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("data: HuggingFaceTokenizer: %w", err)
	}
	defer f.Close()
	var cfg io.Reader
	cfgName := filepath.Join(dir, "tokenizer_config.json")
	if cf, err := os.Open(cfgName); err == nil {
		defer cf.Close()
		cfg = cf
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("data: HuggingFaceTokenizer: %w", err)
	}
	t, err := ReadHFTokenizer(r, cfg, includeSpecial)
	if err != nil {
		return nil, fmt.Errorf("data: HuggingFaceTokenizer %s: %w", dir, err)
	}
	return t, nil
}

// ReadHFTokenizer is LoadHFTokenizer reading tokenizer.json from tj and
// tokenizer_config.json from cfg (nil: none).
func ReadHFTokenizer(tj, cfg io.Reader, includeSpecial bool) (*HFTokenizer, error) {
	var f hfFile
	if err := json.NewDecoder(tj).Decode(&f); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	t := &HFTokenizer{withSpec: includeSpecial, special: NoSpecial(), unk: -1}
	steps := []func(*hfFile) error{t.buildModel, t.buildAdded, t.buildNormalizer, t.buildPreTokenizer, t.buildPostProcessor, t.buildDecoder, t.finish}
	for _, step := range steps {
		if err := step(&f); err != nil {
			return nil, fmt.Errorf("tokenizer.json: %w", err)
		}
	}
	if cfg != nil {
		if err := t.readConfig(cfg); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// readConfig sets Special from tokenizer_config.json.
func (t *HFTokenizer) readConfig(r io.Reader) error {
	var c hfTokenizerConfig
	if err := json.NewDecoder(r).Decode(&c); err != nil {
		return fmt.Errorf("tokenizer_config.json: %w", err)
	}
	for _, e := range []struct {
		field string
		raw   json.RawMessage
		id    *int32
	}{{"bos_token", c.BOS, &t.special.BOS}, {"eos_token", c.EOS, &t.special.EOS}, {"pad_token", c.Pad, &t.special.Pad},
		{"cls_token", c.CLS, &t.special.CLS}, {"sep_token", c.SEP, &t.special.SEP}, {"mask_token", c.Mask, &t.special.Mask}} {
		name, err := hfTokenName(e.field, e.raw)
		if err != nil {
			return err
		}
		if name == "" {
			continue
		}
		id, ok := t.TokenID(name)
		if !ok {
			return fmt.Errorf("tokenizer_config.json: %s %q is not a token of tokenizer.json", e.field, name)
		}
		*e.id = id
	}
	t.special.EOD = t.special.EOS
	return nil
}

// TokenID returns the id of a token as tokenizer.json writes it (an added token's content,
// or a vocabulary entry).
func (t *HFTokenizer) TokenID(tok string) (int32, bool) {
	for _, a := range t.added {
		if a.Content == tok {
			return int32(a.ID), true
		}
	}
	id, ok := t.vocab[tok]
	return id, ok
}

// Encode returns the ids of text, with the post-processor's special tokens if the
// tokenizer includes them.
func (t *HFTokenizer) Encode(text string) []int32 {
	var ids []int32
	if t.withSpec {
		ids = append(ids, t.prefix...)
	}
	from := 0
	for i := 0; i < len(text); i++ {
		cands := t.addedFirst[text[i]]
		if len(cands) == 0 {
			continue
		}
		for _, k := range cands {
			a := &t.added[k]
			if !strings.HasPrefix(text[i:], a.Content) {
				continue
			}
			start, end := i, i+len(a.Content)
			if a.LStrip {
				start = len(strings.TrimRightFunc(text[from:start], unicode.IsSpace)) + from
			}
			if a.RStrip {
				end = len(text) - len(strings.TrimLeftFunc(text[end:], unicode.IsSpace))
			}
			ids = append(t.encodeSegment(ids, text[from:start], from == 0), int32(a.ID))
			from, i = end, end-1
			break
		}
	}
	ids = t.encodeSegment(ids, text[from:], from == 0)
	if t.withSpec {
		ids = append(ids, t.suffix...)
	}
	return ids
}

// encodeSegment appends the ids of text that holds no added token; first reports whether
// it starts the text.
func (t *HFTokenizer) encodeSegment(dst []int32, s string, first bool) []int32 {
	if s == "" {
		return dst
	}
	for _, n := range t.normalize {
		s = n(s)
	}
	if len(t.pretok) == 0 {
		return t.appendWord(dst, s)
	}
	bufs, _ := t.wordBufs.Get().(*[2][]string)
	if bufs == nil {
		bufs = new([2][]string)
	}
	words := append(bufs[0][:0], s)
	for _, p := range t.pretok {
		out := p(bufs[1][:0], words, first)
		bufs[0], bufs[1] = out, words
		words = out
	}
	for _, w := range words {
		dst = t.appendWord(dst, w)
	}
	clear(bufs[0])
	clear(bufs[1])
	t.wordBufs.Put(bufs)
	return dst
}

// appendWord appends the BPE ids of one pre-tokenized word.
func (t *HFTokenizer) appendWord(dst []int32, w string) []int32 {
	if w == "" {
		return dst
	}
	if ids, ok := t.cache.get(w); ok {
		return append(dst, ids...)
	}
	var syms []int32
	if t.wp != nil {
		syms = wordPieces(nil, w, t.vocab, t.wp.prefix, t.wp.maxChars, t.unk)
	} else if t.byteLvl {
		if t.ignoreM {
			if id, ok := t.vocab[gpt2EncodeBytes(w)]; ok {
				syms = []int32{id}
			}
		}
		if syms == nil {
			syms = make([]int32, len(w))
			for i := range len(w) {
				syms[i] = t.byteID[w[i]]
			}
			syms = t.rules.merge(syms)
		}
	} else {
		syms = t.charSymbols(w)
		if id, ok := t.vocab[w]; !(ok && t.ignoreM) {
			syms = t.rules.merge(syms)
		} else {
			syms = append(syms[:0], id)
		}
	}
	t.cache.put(w, syms)
	return append(dst, syms...)
}

// charSymbols returns the initial symbols of a word for a character-level BPE: each
// character's id, else its UTF-8 bytes' <0xXX> ids (byte_fallback), else unk (one for a
// run of unknown characters under fuse_unk); characters with none of these are dropped.
func (t *HFTokenizer) charSymbols(w string) []int32 {
	syms := make([]int32, 0, len(w))
	prevUnk := false
	for i, r := range w {
		n := len(string(r))
		if r == unicode.ReplacementChar && !strings.HasPrefix(w[i:], "\uFFFD") {
			n = 1
		}
		if id, ok := t.vocab[w[i:i+n]]; ok {
			syms, prevUnk = append(syms, id), false
			continue
		}
		if t.byteID[w[i]] >= 0 {
			for k := range n {
				syms = append(syms, t.byteID[w[i+k]])
			}
			prevUnk = false
			continue
		}
		if t.unk >= 0 && !(t.fuseUnk && prevUnk) {
			syms = append(syms, t.unk)
		}
		prevUnk = true
	}
	return syms
}

// Decode returns the text of ids: the decoder applied to their tokens (raw bytes for
// byte-level models, which are not valid UTF-8 where ids split a character). It panics if
// an id is outside [0, VocabSize).
func (t *HFTokenizer) Decode(ids []int32) string {
	s := joinPieces("HFTokenizer", t.pieces, ids)
	for k := 0; k < t.stripLead && strings.HasPrefix(s, " "); k++ {
		s = s[1:]
	}
	if t.cleanup {
		s = wordPieceDecodeCleanup.Replace(s)
	}
	return s
}

// VocabSize returns the number of ids: the largest id of the vocabulary and added tokens,
// plus one.
func (t *HFTokenizer) VocabSize() int { return len(t.pieces) }

// Special returns the BOS, EOS (also EOD) and pad ids tokenizer_config.json names.
func (t *HFTokenizer) Special() SpecialIDs { return t.special }
