package serve

import (
	"slices"
	"strings"
	"unicode/utf8"

	"megago/data"
)

// textStream turns generated ids into text as they arrive, for streaming: each push
// returns the text that is safe to show. Text is held back while it ends in an incomplete
// UTF-8 sequence (the tokenizer decodes it as U+FFFD) or in the beginning of a stop
// string; a stop string ends the text just before it (OpenAI's stop, which is not
// returned).
type textStream struct {
	tok     data.Tokenizer
	stops   []string
	hide    []int32 // ids left out of the text (the stop ids: EOD shows no text)
	ids     []int32
	text    string // what push has returned so far, in order
	stopped bool   // a stop string was found
}

// push adds id and returns the new text to show, and whether a stop string ended the
// text (after which push must not be called).
func (ts *textStream) push(id int32) (delta string, stopped bool) {
	if slices.Contains(ts.hide, id) {
		return "", false
	}
	ts.ids = append(ts.ids, id)
	full := ts.tok.Decode(ts.ids)
	if !strings.HasPrefix(full, ts.text) {
		return "", false // the decoding of earlier ids changed: wait for it to settle
	}
	if k := ts.stopAt(full); k >= 0 {
		ts.stopped = true
		delta = full[len(ts.text):max(k, len(ts.text))]
		ts.text += delta
		return delta, true
	}
	safe := len(full)
	for safe > len(ts.text) {
		r, size := utf8.DecodeLastRuneInString(full[:safe])
		if r != utf8.RuneError {
			break
		}
		safe -= size
	}
	safe -= ts.stopPrefix(full[:safe])
	if safe <= len(ts.text) {
		return "", false
	}
	delta = full[len(ts.text):safe]
	ts.text = full[:safe]
	return delta, false
}

// flush returns the text held back at the end of generation (nothing after a stop).
func (ts *textStream) flush() string {
	if ts.stopped {
		return ""
	}
	full := ts.tok.Decode(ts.ids)
	if !strings.HasPrefix(full, ts.text) {
		return ""
	}
	delta := full[len(ts.text):]
	ts.text = full
	return delta
}

// stopAt returns the byte index of the first stop string in full that ends beyond the
// text already shown, or -1.
func (ts *textStream) stopAt(full string) int {
	best := -1
	for _, s := range ts.stops {
		from := max(0, len(ts.text)-len(s)+1)
		if i := strings.Index(full[from:], s); i >= 0 && (best < 0 || from+i < best) {
			best = from + i
		}
	}
	return best
}

// stopPrefix returns the length of the longest end of text that begins a stop string.
func (ts *textStream) stopPrefix(text string) int {
	n := 0
	for _, s := range ts.stops {
		for k := min(len(s)-1, len(text)); k > n; k-- {
			if strings.HasSuffix(text, s[:k]) {
				n = k
				break
			}
		}
	}
	return n
}
