package data

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// This file holds the pre-tokenizers of Megatron's TikTokenizer: its patterns v1 and v2,
// which use "\s+(?!\S)", a lookahead Go's regexp lacks, matched by hand-written scanners
// that try the alternatives in order as tiktoken's backtracking matcher (fancy-regex)
// does. v1 is cl100k_base's pattern without the contractions and with single digits,
// scanned by cl100kWordEnd (tokenizer_hf_split.go); v2 is o200k_base's without the
// contractions and with single digits.

// Megatron's tiktoken patterns, as megatron/core/tokenizers/text/libraries/
// tiktoken_tokenizer.py writes them.
const (
	tiktokenPatternV1 = `[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+`
	tiktokenPatternV2 = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// tiktokenScanner returns the scanner of --tiktoken-pattern name ("v1" or "v2"): a
// function returning the end of the word that starts at text[i].
func tiktokenScanner(name string) (func(text string, i int) int, error) {
	switch name {
	case "v1":
		return func(text string, i int) int { return cl100kWordEnd(text, i, 1, false) }, nil
	case "v2":
		return tiktokenV2WordEnd, nil
	}
	return nil, fmt.Errorf("tiktoken pattern %q: want v1 or v2", name)
}

// Character classes of the v2 pattern, as bits: a rune may be in several.
const (
	v2Upper  = 1 << iota // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
	v2Lower              // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
	v2Letter             // \p{L}
	v2Number             // \p{N}
	v2Space              // \s
)

// v2ASCII holds v2Class of the ASCII runes.
var v2ASCII = func() (t [utf8.RuneSelf]uint8) {
	for r := range rune(utf8.RuneSelf) {
		t[r] = v2ClassSlow(r)
	}
	return t
}()

// v2Class returns the v2 class bits of r. A byte that is not valid UTF-8 decodes to
// U+FFFD, a symbol (no bits).
func v2Class(r rune) uint8 {
	if r < utf8.RuneSelf {
		return v2ASCII[r]
	}
	return v2ClassSlow(r)
}

func v2ClassSlow(r rune) uint8 {
	switch {
	case unicode.IsUpper(r) || unicode.IsTitle(r):
		return v2Upper | v2Letter
	case unicode.IsLower(r):
		return v2Lower | v2Letter
	case unicode.IsLetter(r): // Lm, Lo
		return v2Upper | v2Lower | v2Letter
	case unicode.IsMark(r):
		return v2Upper | v2Lower
	case unicode.IsNumber(r):
		return v2Number
	case unicode.IsSpace(r):
		return v2Space
	}
	return 0
}

// v2Other reports whether class c is in [^\s\p{L}\p{N}].
func v2Other(c uint8) bool { return c&(v2Space|v2Letter|v2Number) == 0 }

// tiktokenV2WordEnd returns the end of the word at text[i] under the v2 pattern
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|
//	\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// calling the two classes in brackets U and W (Lm, Lo and marks are in both).
func tiktokenV2WordEnd(text string, i int) int {
	r, n := utf8.DecodeRuneInString(text[i:])
	c := v2Class(r)
	// The optional [^\r\n\p{L}\p{N}] is tried taken, then not taken, for each of the
	// first two alternatives in turn.
	starts := [2]int{i, i}
	if c&(v2Letter|v2Number) == 0 && !isCRLF(r) {
		starts[0] = i + n
	}
	for _, j := range starts {
		if e := v2UpperLowerEnd(text, j); e > 0 {
			return e
		}
	}
	for _, j := range starts {
		if k := v2RunEnd(text, j, v2Upper); k > j {
			return v2RunEnd(text, k, v2Lower) // U+W*
		}
	}
	if c&v2Number != 0 {
		return i + n
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n/]*'
	start := i
	if r == ' ' && i+n < len(text) {
		if r2, _ := utf8.DecodeRuneInString(text[i+n:]); v2Other(v2Class(r2)) {
			start, c = i+n, 0
		}
	}
	if v2Other(c) {
		_, n0 := utf8.DecodeRuneInString(text[start:])
		j := start + n0
		for j < len(text) {
			r2, n2 := utf8.DecodeRuneInString(text[j:])
			if !v2Other(v2Class(r2)) {
				break
			}
			j += n2
		}
		for j < len(text) && (text[j] == '\r' || text[j] == '\n' || text[j] == '/') {
			j++
		}
		return j
	}
	return spaceWordEnd(text, i)
}

// v2UpperLowerEnd returns the end of U*W+ matched at text[j], or 0 if it does not match.
// U* takes its longest run; if W+ cannot follow, U* gives back characters until the last
// one it keeps is followed by a W, which W+ takes alone (the next one is not in W).
func v2UpperLowerEnd(text string, j int) int {
	lastW := -1 // end of the last W character in the U run
	k := j
	for k < len(text) {
		r, n := utf8.DecodeRuneInString(text[k:])
		c := v2Class(r)
		if c&v2Upper == 0 {
			if c&v2Lower != 0 {
				return v2RunEnd(text, k+n, v2Lower)
			}
			break
		}
		if c&v2Lower != 0 {
			lastW = k + n
		}
		k += n
	}
	return max(lastW, 0)
}

// v2RunEnd returns the end of the run of runes with class bit bit that starts at text[j].
func v2RunEnd(text string, j int, bit uint8) int {
	for j < len(text) {
		r, n := utf8.DecodeRuneInString(text[j:])
		if v2Class(r)&bit == 0 {
			break
		}
		j += n
	}
	return j
}
