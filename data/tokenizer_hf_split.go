package data

import (
	"fmt"
	"unicode/utf8"
)

// This file holds the Split pre-tokenizer patterns of Hugging Face tokenizer.json files.
// They use "\s+(?!\S)", a lookahead Go's regexp lacks, so each known pattern is matched by
// a hand-written scanner that tries its alternatives in order as a backtracking matcher
// does; other patterns are refused.

// hfSplitPatterns maps each known Split regex to its scanner: a function returning the
// end of the match that starts at text[i] (every pattern matches at every position).
var hfSplitPatterns = map[string]func(text string, i int) int{
	// GPT-2 (also what the ByteLevel pre-tokenizer uses when use_regex is true).
	`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`: gpt2WordEnd,
	// Llama 3 (tiktoken's cl100k_base pattern).
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`: func(text string, i int) int {
		return cl100kWordEnd(text, i, 3, true)
	},
	// Qwen2, Qwen2.5, Qwen3: Llama 3's with single digits.
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`: func(text string, i int) int {
		return cl100kWordEnd(text, i, 1, true)
	},
}

// hfSplitScanner returns the scanner of a Split pattern, or an error naming it.
func hfSplitScanner(pattern string) (func(string, int) int, error) {
	if f, ok := hfSplitPatterns[pattern]; ok {
		return f, nil
	}
	return nil, fmt.Errorf("Split regex %q is not one of the patterns megago knows (GPT-2's, Llama 3's, Qwen's): Go's regexp cannot run Hugging Face's lookahead patterns", pattern)
}

// isCRLF reports whether r is '\r' or '\n'.
func isCRLF(r rune) bool { return r == '\r' || r == '\n' }

// cl100kWordEnd returns the end of the word at text[i] under Llama 3's pattern with at
// most maxDigits numbers per word,
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// without the contractions alternative unless contractions is set (Megatron's tiktoken
// v1 pattern has none).
func cl100kWordEnd(text string, i, maxDigits int, contractions bool) int {
	r, n := utf8.DecodeRuneInString(text[i:])
	if contractions && r == '\'' {
		if e := contractionEnd(text, i+n, true); e > 0 {
			return e
		}
	}
	c := gpt2Class(r)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c == classLetter {
		return classRunEnd(text, i+n, classLetter)
	}
	if c != classNumber && !isCRLF(r) && i+n < len(text) {
		if r2, n2 := utf8.DecodeRuneInString(text[i+n:]); gpt2Class(r2) == classLetter {
			return classRunEnd(text, i+n+n2, classLetter)
		}
	}
	// \p{N}{1,k}
	if c == classNumber {
		j := i + n
		for k := 1; k < maxDigits && j < len(text); k++ {
			r2, n2 := utf8.DecodeRuneInString(text[j:])
			if gpt2Class(r2) != classNumber {
				break
			}
			j += n2
		}
		return j
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	start := i
	if r == ' ' && i+n < len(text) {
		if r2, _ := utf8.DecodeRuneInString(text[i+n:]); gpt2Class(r2) == classOther {
			start, c = i+n, classOther
		}
	}
	if c == classOther {
		_, n0 := utf8.DecodeRuneInString(text[start:])
		j := classRunEnd(text, start+n0, classOther)
		for j < len(text) && (text[j] == '\r' || text[j] == '\n') {
			j++
		}
		return j
	}
	return spaceWordEnd(text, i)
}

// spaceWordEnd returns the end of the word at the whitespace text[i] under the
// alternatives \s*[\r\n]+|\s+(?!\S)|\s+ (\s*[\r\n] ends at the same place).
func spaceWordEnd(text string, i int) int {
	// A whitespace run from i to j; lastNL is the end of its last '\r' or '\n'.
	lastNL, last, j := -1, i, i
	for j < len(text) {
		r2, n2 := utf8.DecodeRuneInString(text[j:])
		if gpt2Class(r2) != classSpace {
			break
		}
		if isCRLF(r2) {
			lastNL = j + n2
		}
		last, j = j, j+n2
	}
	switch {
	case lastNL > 0: // \s*[\r\n]+
		return lastNL
	case j == len(text) || last == i: // \s+(?!\S) at the end, or \s+ of one character
		return j
	}
	return last // \s+(?!\S) leaves the last space for the next word
}

// asciiEqualFold reports whether a equals the lower-case ASCII string lower, ignoring
// ASCII case.
func asciiEqualFold(a, lower string) bool {
	for k := range len(a) {
		c := a[k]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[k] {
			return false
		}
	}
	return true
}
