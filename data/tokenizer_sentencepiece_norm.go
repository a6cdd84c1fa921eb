package data

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"unicode/utf8"
)

// This file is SentencePiece's normalizer (normalizer.cc). A model's normalization rules
// (nmt_nfkc, nfkc_cf, ...) are compiled into its precompiled_charsmap: a Darts-clone
// double-array trie over UTF-8 input whose values point into a table of NUL-terminated
// replacement strings. Reading the trie reproduces SentencePiece exactly for every rule
// set, including nmt_nfkc's additions to NFKC (control characters dropped, some spaces
// unified); a model without a charsmap ("identity") copies its input.

// spaceMarker is U+2581 (LOWER ONE EIGHTH BLOCK), SentencePiece's visible space.
const spaceMarker = "\u2581"

// dartsTrie is a Darts-clone double array. Each unit packs, from its low bits: a label
// byte, a has-leaf bit (bit 8), and an offset to its children (bits 10..30, shifted left
// 8 more when bit 9 is set); a leaf unit holds a 31-bit value.
type dartsTrie []uint32

func (u dartsTrie) offset(x uint32) uint32 { return (x >> 10) << ((x & (1 << 9)) >> 6) }

// longestPrefix returns the value and length of the longest key of the trie that is a
// prefix of s; length 0 if none (Darts-clone's commonPrefixSearch, last result).
func (u dartsTrie) longestPrefix(s string) (value uint32, length int) {
	if len(u) == 0 {
		return 0, 0
	}
	pos := u.offset(u[0])
	for i := 0; i < len(s); i++ {
		c := uint32(s[i])
		pos ^= c
		if int(pos) >= len(u) {
			return value, length
		}
		x := u[pos]
		if x&((1<<31)|0xFF) != c { // label
			return value, length
		}
		pos ^= u.offset(x)
		if (x>>8)&1 == 1 { // has leaf
			if int(pos) >= len(u) {
				return value, length
			}
			value, length = u[pos]&(1<<31-1), i+1
		}
	}
	return value, length
}

// startsWith reports whether some key of the trie starts with the byte c.
func (u dartsTrie) startsWith(c byte) bool {
	if len(u) == 0 {
		return false
	}
	pos := u.offset(u[0]) ^ uint32(c)
	return int(pos) < len(u) && u[pos]&((1<<31)|0xFF) == uint32(c)
}

// spNormalizer is SentencePiece's Normalizer for one model.
type spNormalizer struct {
	trie                                            dartsTrie
	replacement                                     []byte    // NUL-terminated strings the trie's values point into
	user                                            *byteTrie // user-defined symbols, never normalized; nil if none
	addDummyPrefix, removeExtraWS, escapeWS, suffix bool
	// plain marks the ASCII bytes other than space that no rule or user-defined symbol
	// starts with: normalization copies them (findPlain sets it).
	plain [utf8.RuneSelf]bool
}

// findPlain sets n.plain.
func (n *spNormalizer) findPlain() {
	for c := range byte(utf8.RuneSelf) {
		n.plain[c] = c != ' ' && !n.trie.startsWith(c) && (n.user == nil || n.user.next[uint64(c)] == 0)
	}
}

// decodeCharsMap splits a precompiled charsmap: a little-endian uint32 trie size in bytes,
// the trie's units, then the replacement strings.
func decodeCharsMap(blob []byte) (dartsTrie, []byte, error) {
	if len(blob) <= 4 {
		return nil, nil, errors.New("precompiled charsmap too short")
	}
	n := binary.LittleEndian.Uint32(blob)
	if int64(n) >= int64(len(blob)) || n%4 != 0 {
		return nil, nil, errors.New("precompiled charsmap: trie size exceeds the blob")
	}
	units := make(dartsTrie, n/4)
	for i := range units {
		units[i] = binary.LittleEndian.Uint32(blob[4+4*i:])
	}
	return units, blob[4+n:], nil
}

// prefix normalizes the start of s: it returns the replacement text and the number of
// bytes of s consumed. A user-defined symbol is kept as it is; otherwise the longest
// charsmap rule applies; otherwise one character is copied (an invalid byte becomes
// U+FFFD).
func (n *spNormalizer) prefix(s string) (string, int) {
	if n.user != nil {
		if _, l := n.user.longest(s); l > 0 {
			return s[:l], l
		}
	}
	if v, l := n.trie.longestPrefix(s); l > 0 && int(v) < len(n.replacement) {
		r := n.replacement[v:]
		if end := bytes.IndexByte(r, 0); end >= 0 {
			r = r[:end]
		}
		return string(r), l
	}
	r, size := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && size <= 1 {
		return "\uFFFD", 1
	}
	return s[:size], size
}

// normalize is Normalizer::Normalize: rules applied left to right; with remove_extra_
// whitespaces, leading and trailing spaces dropped and runs of spaces collapsed; a dummy
// space prefix added; spaces escaped as U+2581.
func (n *spNormalizer) normalize(s string) string {
	if n.removeExtraWS {
		for len(s) > 0 {
			r, l := n.prefix(s)
			if r != " " {
				break
			}
			s = s[l:]
		}
	}
	if s == "" {
		return ""
	}
	var b strings.Builder
	b.Grow(len(s) + len(s)/2 + len(spaceMarker)) // a space becomes 3 bytes
	space := " "
	if n.escapeWS {
		space = spaceMarker
	}
	if !n.suffix && n.addDummyPrefix {
		b.WriteString(space)
	}
	prevSpace := n.removeExtraWS
	identity := len(n.trie) == 0 && n.user == nil
	for len(s) > 0 {
		k := 0 // copy the characters no rule changes as they are
		if identity {
			k = plainPrefix(s)
		} else {
			for k < len(s) && s[k] < utf8.RuneSelf && n.plain[s[k]] {
				k++
			}
		}
		if k > 0 {
			b.WriteString(s[:k])
			s, prevSpace = s[k:], false
			continue
		}
		r, l := n.prefix(s)
		for prevSpace && strings.HasPrefix(r, " ") {
			r = r[1:]
		}
		if r != "" {
			if n.escapeWS {
				writeEscapedSpaces(&b, r)
			} else {
				b.WriteString(r)
			}
			prevSpace = strings.HasSuffix(r, " ")
		}
		s = s[l:]
		if !n.removeExtraWS {
			prevSpace = false
		}
	}
	out := b.String()
	if n.removeExtraWS {
		for strings.HasSuffix(out, space) {
			out = out[:len(out)-len(space)]
		}
	}
	if n.suffix && n.addDummyPrefix {
		out += space
	}
	return out
}

// plainPrefix returns the length of the valid UTF-8 before s's first space or invalid
// byte: what an identity normalizer copies unchanged.
func plainPrefix(s string) int {
	k := 0
	for k < len(s) {
		if c := s[k]; c < utf8.RuneSelf {
			if c == ' ' {
				break
			}
			k++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[k:])
		if r == utf8.RuneError && size <= 1 {
			break
		}
		k += size
	}
	return k
}

// writeEscapedSpaces writes r with each space as "▁".
func writeEscapedSpaces(b *strings.Builder, r string) {
	for {
		i := strings.IndexByte(r, ' ')
		if i < 0 {
			b.WriteString(r)
			return
		}
		b.WriteString(r[:i])
		b.WriteString(spaceMarker)
		r = r[i+1:]
	}
}

// byteTrie is a trie over bytes: node 0 is the root; next maps (node, byte) to a child;
// val[node] is the id of the key ending there, or -1.
type byteTrie struct {
	next map[uint64]int32
	val  []int32
}

func newByteTrie() *byteTrie { return &byteTrie{next: make(map[uint64]int32), val: []int32{-1}} }

func (t *byteTrie) insert(key string, id int32) {
	node := int32(0)
	for i := 0; i < len(key); i++ {
		k := uint64(node)<<8 | uint64(key[i])
		child, ok := t.next[k]
		if !ok {
			child = int32(len(t.val))
			t.val = append(t.val, -1)
			t.next[k] = child
		}
		node = child
	}
	t.val[node] = id
}

// longest returns the id and length of the longest key that is a prefix of s; length 0
// if none.
func (t *byteTrie) longest(s string) (id int32, length int) {
	node := int32(0)
	for i := 0; i < len(s); i++ {
		child, ok := t.next[uint64(node)<<8|uint64(s[i])]
		if !ok {
			break
		}
		node = child
		if t.val[node] >= 0 {
			id, length = t.val[node], i+1
		}
	}
	return id, length
}
