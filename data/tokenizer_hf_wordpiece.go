package data

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// This file holds the WordPiece parts of HFTokenizer: the model, BertNormalizer,
// BertPreTokenizer and the WordPiece decoder, as bert-base-uncased's tokenizer.json uses
// them.

// hfWordPiece is a WordPiece model's settings.
type hfWordPiece struct {
	prefix   string // continuing_subword_prefix
	maxChars int    // max_input_chars_per_word: longer words are unk
}

// buildWordPiece reads a WordPiece model.
func (t *HFTokenizer) buildWordPiece(f *hfFile) error {
	m := &f.Model
	if err := t.readVocab(f); err != nil {
		return err
	}
	if m.UnkToken == nil {
		return fmt.Errorf("model.unk_token: a WordPiece model needs one")
	}
	id, ok := t.vocab[*m.UnkToken]
	if !ok {
		return fmt.Errorf("model.unk_token %q is not in model.vocab", *m.UnkToken)
	}
	t.unk = id
	wp := &hfWordPiece{prefix: "##", maxChars: 100}
	if m.ContinuingSubwordPrefix != nil {
		wp.prefix = *m.ContinuingSubwordPrefix
	}
	if m.MaxInputCharsPerWord != nil {
		if *m.MaxInputCharsPerWord < 1 {
			return fmt.Errorf("model.max_input_chars_per_word %d: want at least 1", *m.MaxInputCharsPerWord)
		}
		wp.maxChars = *m.MaxInputCharsPerWord
	}
	t.wp = wp
	for b := range 256 {
		t.byteID[b] = -1
	}
	return nil
}

// wordPieces appends the greedy longest-match-first WordPiece ids of word, pieces after
// the first written with prefix; a word with over maxChars characters, or one that cannot
// be covered, is unk.
func wordPieces(dst []int32, word string, vocab map[string]int32, prefix string, maxChars int, unk int32) []int32 {
	if utf8.RuneCountInString(word) > maxChars {
		return append(dst, unk)
	}
	n := len(dst)
	for start := 0; start < len(word); {
		end, found := len(word), int32(-1)
		for end > start {
			sub := word[start:end]
			if start > 0 {
				sub = prefix + sub
			}
			if id, ok := vocab[sub]; ok {
				found = id
				break
			}
			_, size := utf8.DecodeLastRuneInString(word[start:end])
			end -= size
		}
		if found < 0 {
			return append(dst[:n], unk)
		}
		dst = append(dst, found)
		start = end
	}
	return dst
}

// bertNormalizer returns Hugging Face's BertNormalizer: clean_text drops NUL, U+FFFD and
// control characters (category C but \t \n \r) and turns whitespace into spaces;
// handle_chinese_chars puts spaces around CJK ideographs; strip_accents (by default as
// lowercase) decomposes and drops nonspacing marks; lowercase lower-cases, in that order.
func bertNormalizer(c *hfComponent) func(string) string {
	on := func(b *bool, def bool) bool {
		if b == nil {
			return def
		}
		return *b
	}
	clean, cjk, lower := on(c.CleanText, true), on(c.HandleChineseChars, true), on(c.Lowercase, true)
	strip := on(c.StripAccents, lower)
	return func(s string) string {
		var b strings.Builder
		for _, r := range s {
			switch {
			case clean && (r == 0 || r == utf8.RuneError || bertIsControl(r)):
			case clean && unicode.IsSpace(r):
				b.WriteByte(' ')
			case cjk && bertIsCJK(r):
				b.WriteByte(' ')
				b.WriteRune(r)
				b.WriteByte(' ')
			default:
				b.WriteRune(r)
			}
		}
		out := b.String()
		if strip {
			out = bertStripAccents(out)
		}
		if lower {
			out = strings.ToLower(out)
		}
		return out
	}
}

// bertPreTokenize is Hugging Face's BertPreTokenizer: words end at whitespace (dropped)
// and every punctuation character is a word of its own.
func bertPreTokenize(out, ws []string, _ bool) []string {
	for _, w := range ws {
		start := -1
		for i := 0; i < len(w); {
			r, n := utf8.DecodeRuneInString(w[i:])
			switch {
			case unicode.IsSpace(r) || bertIsPunct(r):
				if start >= 0 {
					out = append(out, w[start:i])
					start = -1
				}
				if !unicode.IsSpace(r) {
					out = append(out, w[i:i+n])
				}
			case start < 0:
				start = i
			}
			i += n
		}
		if start >= 0 {
			out = append(out, w[start:])
		}
	}
	return out
}

// wordPieceDecodeCleanup is the WordPiece decoder's cleanup, applied to the whole text as
// transformers' clean_up_tokenization does (Hugging Face's Rust decoder applies it to each
// token, which cannot join " ' " across tokens).
var wordPieceDecodeCleanup = strings.NewReplacer(" .", ".", " ?", "?", " !", "!", " ,", ",", " ' ", "'",
	" n't", "n't", " 'm", "'m", " do not", " don't", " 's", "'s", " 've", "'ve", " 're", "'re")

// addWordPieceDecoder sets the WordPiece decoder: a token that starts with prefix is glued
// to the one before (prefix dropped), any other is preceded by a space (none before the
// first); cleanup applies wordPieceDecodeCleanup to the text.
func (t *HFTokenizer) addWordPieceDecoder(c *hfComponent, steps *[]func(string) string) {
	prefix := c.Prefix
	if prefix == "" {
		prefix = "##"
	}
	step := func(tok string) string {
		if after, ok := strings.CutPrefix(tok, prefix); ok {
			return after
		}
		return " " + tok
	}
	*steps = append(*steps, step)
	t.decodeAdded = step
	t.stripLead = 1
	t.cleanup = c.Cleanup == nil || *c.Cleanup
}
