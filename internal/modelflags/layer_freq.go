package modelflags

import (
	"fmt"
	"strconv"
	"strings"
)

// --moe-layer-freq is an integer N (every N-th layer, starting with layer 0, is an MoE
// layer) or one of the Python list expressions Megatron's arguments.py evaluates
// (_eval_pattern), such as "[1,0,1,0]" or "([1]*3+[0]*1)*2": list literals of 0 and 1,
// "*" by an integer (on either side), "+" (concatenation of lists, addition of
// integers) and parentheses, "*" binding tighter than "+" as in Python. Megatron
// evaluates the string with eval after checking its characters; this parser accepts
// exactly that grammar, and refuses elements other than 0 and 1 and expansions longer
// than maxPatternLen.

// maxPatternLen bounds an expanded pattern, and every integer of an expression, so a
// typo ("[1]*100000000000") is an error rather than an allocation.
const maxPatternLen = 1 << 16

// parseLayerFreq parses s as --moe-layer-freq: an integer N ≥ 1 (pattern nil), or a
// list expression (freq 0, pattern its expansion, one bool per layer, true for MoE).
func parseLayerFreq(s string) (freq int, pattern []bool, err error) {
	if !strings.ContainsRune(s, '[') {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return 0, nil, fmt.Errorf("--moe-layer-freq %q: want an integer N ≥ 1 (every N-th layer) or a list such as \"([1]*3+[0]*1)*2\"", s)
		}
		return n, nil, nil
	}
	p := &patternParser{s: s}
	v, err := p.expr()
	if err == nil && p.skipSpace() < len(p.s) {
		err = p.errorf("unexpected %q", p.s[p.i:])
	}
	if err == nil && !v.isList {
		err = fmt.Errorf("the expression is the integer %d, not a list", v.n)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("--moe-layer-freq %q: %w", s, err)
	}
	return 0, v.list, nil
}

// patternValue is a value of a list expression: an integer or a list of 0/1.
type patternValue struct {
	isList bool
	n      int
	list   []bool
}

// patternParser is a recursive-descent parser of the grammar
//
//	expr    = term { "+" term }
//	term    = primary { "*" primary }
//	primary = list | int | "(" expr ")"
//	list    = "[" [ bit { "," bit } [ "," ] ] "]"
type patternParser struct {
	s string
	i int
}

func (p *patternParser) errorf(format string, args ...any) error {
	return fmt.Errorf("at offset %d: %s", p.i, fmt.Sprintf(format, args...))
}

// skipSpace moves past blanks and returns the new offset.
func (p *patternParser) skipSpace() int {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
	return p.i
}

// eat moves past c, reporting whether it was next.
func (p *patternParser) eat(c byte) bool {
	if p.skipSpace() < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *patternParser) expr() (patternValue, error) {
	v, err := p.term()
	for err == nil && p.eat('+') {
		var w patternValue
		if w, err = p.term(); err != nil {
			break
		}
		switch {
		case v.isList && w.isList:
			if len(v.list)+len(w.list) > maxPatternLen {
				return v, p.errorf("the pattern is longer than %d layers", maxPatternLen)
			}
			v.list = append(v.list[:len(v.list):len(v.list)], w.list...)
		case !v.isList && !w.isList:
			v.n += w.n
			if v.n > maxPatternLen {
				return v, p.errorf("%d is larger than %d", v.n, maxPatternLen)
			}
		default:
			return v, p.errorf("cannot add a list and an integer")
		}
	}
	return v, err
}

func (p *patternParser) term() (patternValue, error) {
	v, err := p.primary()
	for err == nil && p.eat('*') {
		var w patternValue
		if w, err = p.primary(); err != nil {
			break
		}
		if v.isList == w.isList {
			if v.isList {
				return v, p.errorf("cannot multiply two lists")
			}
			v.n *= w.n // both ≤ maxPatternLen: no overflow
			if v.n > maxPatternLen {
				return v, p.errorf("%d is larger than %d", v.n, maxPatternLen)
			}
			continue
		}
		if !v.isList {
			v, w = w, v
		}
		if w.n > 0 && len(v.list) > maxPatternLen/w.n {
			return v, p.errorf("the pattern is longer than %d layers", maxPatternLen)
		}
		rep := make([]bool, 0, len(v.list)*max(w.n, 0))
		for range w.n {
			rep = append(rep, v.list...)
		}
		v.list = rep
	}
	return v, err
}

func (p *patternParser) primary() (patternValue, error) {
	switch {
	case p.eat('('):
		v, err := p.expr()
		if err == nil && !p.eat(')') {
			err = p.errorf("want )")
		}
		return v, err
	case p.eat('['):
		return p.list()
	}
	start := p.skipSpace()
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	if p.i == start {
		if p.i == len(p.s) {
			return patternValue{}, p.errorf("unexpected end")
		}
		return patternValue{}, p.errorf("unexpected %q", p.s[p.i:p.i+1])
	}
	n, err := strconv.Atoi(p.s[start:p.i])
	if err != nil || n > maxPatternLen {
		return patternValue{}, p.errorf("%s is larger than %d", p.s[start:p.i], maxPatternLen)
	}
	return patternValue{n: n}, nil
}

// list parses the rest of a list literal after its "[".
func (p *patternParser) list() (patternValue, error) {
	v := patternValue{isList: true, list: []bool{}}
	for !p.eat(']') {
		if p.skipSpace() == len(p.s) {
			return v, p.errorf("want ]")
		}
		c := p.s[p.i]
		if c != '0' && c != '1' || p.i+1 < len(p.s) && p.s[p.i+1] >= '0' && p.s[p.i+1] <= '9' {
			return v, p.errorf("list elements must be 0 (dense layer) or 1 (MoE layer)")
		}
		p.i++
		v.list = append(v.list, c == '1')
		if !p.eat(',') && !p.eat(']') {
			return v, p.errorf("want , or ]")
		} else if p.s[p.i-1] == ']' {
			break
		}
	}
	return v, nil
}

// ExpandLayerFreq returns the MoE layers --moe-layer-freq s gives a model of layers
// layers, one 0 or 1 per layer ("1,0,1,0"), whichever form s has.
func ExpandLayerFreq(s string, layers int) (string, error) {
	freq, pattern, err := parseLayerFreq(s)
	if err != nil || pattern != nil {
		return patternString(pattern), err
	}
	pattern = make([]bool, layers)
	for i := range pattern {
		pattern[i] = i%freq == 0
	}
	return patternString(pattern), nil
}

// patternString writes a pattern as MoEConfig.LayerPattern: "1,0,1,0".
func patternString(pattern []bool) string {
	var b strings.Builder
	for i, moe := range pattern {
		if i > 0 {
			b.WriteByte(',')
		}
		if moe {
			b.WriteByte('1')
		} else {
			b.WriteByte('0')
		}
	}
	return b.String()
}
