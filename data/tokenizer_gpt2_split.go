package data

import (
	"unicode"
	"unicode/utf8"
)

// This file holds the two text-level pieces of GPT-2's byte-level BPE: the pre-tokenizer
// that cuts text into words, and the byte-to-character table that vocab.json and
// merges.txt are written in.

// gpt2Split calls emit with each word of text, in order, as GPT-2's pre-tokenizer cuts it.
// GPT-2 cuts with the regular expression
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// which Go's regexp cannot express (it has no lookahead), so gpt2WordEnd scans by hand.
// The words concatenate to text.
func gpt2Split(text string, emit func(word string)) {
	for i := 0; i < len(text); {
		j := gpt2WordEnd(text, i)
		emit(text[i:j])
		i = j
	}
}

// Character classes of the pre-tokenizer: \p{L}, \p{N}, \s, and everything else.
const (
	classLetter = iota
	classNumber
	classSpace
	classOther
)

// gpt2Class returns the pre-tokenizer class of r. Go's unicode.IsSpace is the Unicode
// White_Space property, which is what \s means in the regex (and in tiktoken-go's
// regexp2). A byte that is not valid UTF-8 decodes to U+FFFD, class other.
func gpt2Class(r rune) int {
	switch {
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsNumber(r):
		return classNumber
	case unicode.IsSpace(r):
		return classSpace
	}
	return classOther
}

// gpt2WordEnd returns the end of the word that starts at text[i], trying the regex's
// alternatives in order as a backtracking matcher does.
func gpt2WordEnd(text string, i int) int {
	r, n := utf8.DecodeRuneInString(text[i:])
	if r == '\'' {
		if e := contractionEnd(text, i+n, false); e > 0 {
			return e
		}
	}
	// " ?X+": a single ASCII space joins a following run of letters, numbers or others.
	if r == ' ' && i+n < len(text) {
		r2, n2 := utf8.DecodeRuneInString(text[i+n:])
		if c := gpt2Class(r2); c != classSpace {
			return classRunEnd(text, i+n+n2, c)
		}
	}
	if c := gpt2Class(r); c != classSpace {
		return classRunEnd(text, i+n, c)
	}
	// A whitespace run. At the end of the text, "\s+(?!\S)" takes all of it. Followed by
	// non-space, it backtracks to leave the last whitespace character for the next word;
	// if the run is one character, "\s+(?!\S)" fails and "\s+" takes that character.
	last, j := i, i+n
	for j < len(text) {
		r2, n2 := utf8.DecodeRuneInString(text[j:])
		if gpt2Class(r2) != classSpace {
			break
		}
		last, j = j, j+n2
	}
	if j < len(text) && last > i {
		return last
	}
	return j
}

// contractionEnd returns the end of the contraction suffix ('s 't 're 've 'm 'll 'd)
// whose apostrophe ends just before text[j], or 0 if there is none: case sensitive as in
// GPT-2, or ignoring ASCII case with fold (Llama 3's (?i:...)).
func contractionEnd(text string, j int, fold bool) int {
	rest := text[j:]
	for _, s := range [...]string{"s", "t", "re", "ve", "m", "ll", "d"} {
		if len(rest) >= len(s) && (rest[:len(s)] == s || fold && asciiEqualFold(rest[:len(s)], s)) {
			return j + len(s)
		}
	}
	return 0
}

// classRunEnd returns the end of the run of class c that continues at text[j].
func classRunEnd(text string, j, c int) int {
	for j < len(text) {
		r, n := utf8.DecodeRuneInString(text[j:])
		if gpt2Class(r) != c {
			break
		}
		j += n
	}
	return j
}

// gpt2ByteChars is GPT-2's bytes_to_unicode: each byte's character in vocab.json and
// merges.txt. Printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for
// themselves; the other 68 bytes, in increasing order, take U+0100, U+0101, ... so that
// no token contains whitespace or a control character (the space byte is 'Ġ', U+0120).
// gpt2ByteOrder lists the bytes in the order GPT-2's vocabulary numbers them: the
// printable ones first, then the others.
var gpt2ByteChars, gpt2ByteOrder = gpt2ByteTables()

// gpt2CharBytes inverts gpt2ByteChars.
var gpt2CharBytes = func() map[rune]byte {
	m := make(map[rune]byte, 256)
	for b, r := range gpt2ByteChars {
		m[r] = byte(b)
	}
	return m
}()

func gpt2ByteTables() (chars [256]rune, order [256]byte) {
	printable := func(b int) bool {
		return b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF
	}
	k := 0
	for b := range 256 {
		if printable(b) {
			chars[b] = rune(b)
			order[k] = byte(b)
			k++
		}
	}
	extra := 0
	for b := range 256 {
		if !printable(b) {
			chars[b] = rune(256 + extra)
			order[k] = byte(b)
			extra++
			k++
		}
	}
	return chars, order
}

// gpt2EncodeBytes writes raw bytes in GPT-2's byte characters.
func gpt2EncodeBytes(raw string) string {
	out := make([]rune, len(raw))
	for i := 0; i < len(raw); i++ {
		out[i] = gpt2ByteChars[raw[i]]
	}
	return string(out)
}

// gpt2DecodeChars turns a vocab.json token back into raw bytes. Characters outside the
// byte table (in added tokens such as "<|endoftext|>" every character is in it, but other
// files may add anything) are kept as their UTF-8.
func gpt2DecodeChars(token string) string {
	out := make([]byte, 0, len(token))
	for _, r := range token {
		if b, ok := gpt2CharBytes[r]; ok {
			out = append(out, b)
		} else {
			out = utf8.AppendRune(out, r)
		}
	}
	return string(out)
}
