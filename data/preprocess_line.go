package data

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/neurosnap/sentences"
	"github.com/neurosnap/sentences/english"
)

// LineError reports an input line the preprocessor cannot use: invalid JSON, a missing key,
// a value of the wrong type, or text the tokenizer rejects.
type LineError struct {
	File string // input path
	Line int64  // 1-based line number
	Err  error  // what is wrong with the line
}

// Error returns "data: FILE:LINE: message".
func (e *LineError) Error() string { return fmt.Sprintf("data: %s:%d: %v", e.File, e.Line, e.Err) }

// Unwrap returns the underlying error.
func (e *LineError) Unwrap() error { return e.Err }

// jsonValue is the value of one JSON key: a string, or a list of strings (Megatron's
// sentences).
type jsonValue struct {
	texts []string // the string, or the list's elements
	list  bool
}

// jsonSpace is the whitespace JSON allows around a value (RFC 8259; Python's json.loads,
// which Megatron's preprocessor uses, allows the same): not \v, \f or Unicode spaces.
const jsonSpace = " \t\n\r"

// parseLine decodes one JSON-lines record and returns the value of each of keys.
func parseLine(line []byte, keys []string) ([]jsonValue, error) {
	line = bytes.Trim(line, jsonSpace)
	if len(line) == 0 {
		return nil, errors.New("empty line")
	}
	if line[0] != '{' {
		if !json.Valid(line) {
			return nil, fmt.Errorf("invalid JSON: %w", jsonError(line))
		}
		return nil, errors.New("the line is valid JSON but not an object")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(line, &obj); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	vals := make([]jsonValue, len(keys))
	for k, key := range keys {
		raw, ok := obj[key]
		if !ok {
			return nil, fmt.Errorf("missing key %q", key)
		}
		switch raw[0] {
		case '"':
			s, err := jsonString(raw)
			if err != nil {
				return nil, fmt.Errorf("key %q: %w", key, err)
			}
			vals[k] = jsonValue{texts: []string{s}}
		case '[':
			vals[k].list = true
			if err := json.Unmarshal(raw, &vals[k].texts); err != nil {
				return nil, fmt.Errorf("key %q: a list whose elements are not all strings", key)
			}
		default:
			return nil, fmt.Errorf("key %q is %s, want a string or a list of strings", key, jsonKind(raw[0]))
		}
	}
	return vals, nil
}

// jsonString decodes raw, a JSON string already validated by the decoder that produced it.
// A string without escapes and with valid UTF-8 is its bytes between the quotes; others go
// through encoding/json, which also replaces invalid UTF-8 with U+FFFD.
func jsonString(raw []byte) (string, error) {
	body := raw[1 : len(raw)-1]
	if bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		return string(body), nil
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}

// jsonError returns the decoder's error for invalid JSON b.
func jsonError(b []byte) error {
	var v any
	return json.Unmarshal(b, &v)
}

// jsonKind names the JSON type whose encoding starts with c.
func jsonKind(c byte) string {
	switch c {
	case '{':
		return "an object"
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	}
	return "a number"
}

// strictEncoder is implemented by tokenizers that can report text they cannot encode, such
// as NullTokenizer; the preprocessor then reports such lines instead of dropping ids.
type strictEncoder interface {
	EncodeStrict(text string) ([]int32, error)
}

// lineEncoder turns parsed lines into token ids; each worker has its own, because a Punkt
// sentence splitter is not documented as safe for concurrent use.
type lineEncoder struct {
	tok      Tokenizer
	strict   strictEncoder // tok, if it implements it
	keys     []string
	eod      int32 // appended to each non-empty document; -1 for none
	splitter *sentences.DefaultSentenceTokenizer
}

func newLineEncoder(tok Tokenizer, keys []string, eod int32, split bool) (*lineEncoder, error) {
	e := &lineEncoder{tok: tok, keys: keys, eod: eod}
	e.strict, _ = tok.(strictEncoder)
	if split {
		var err error
		if e.splitter, err = english.NewSentenceTokenizer(nil); err != nil {
			return nil, fmt.Errorf("data: load the English Punkt sentence splitter: %w", err)
		}
	}
	return e, nil
}

// encodeLine parses line and appends one document per key to out's per-key buffers. On an
// error it leaves out unchanged.
func (e *lineEncoder) encodeLine(line []byte, out []keyDocs) error {
	vals, err := parseLine(line, e.keys)
	if err != nil {
		return err
	}
	marks := make([]keyDocs, len(out)) // lengths to roll back to on error
	copy(marks, out)
	for k, v := range vals {
		if err := e.encodeDoc(v, &out[k]); err != nil {
			for i := range out {
				out[i].truncate(marks[i])
			}
			return fmt.Errorf("key %q: %w", e.keys[k], err)
		}
	}
	return nil
}

// encodeDoc appends the document v to d, following tools/preprocess_data.py: each text is
// one sequence (a string is split into sentences first when splitting; a list is taken as
// already split), zero-token sequences are dropped, and EOD is appended to the last
// sequence of a non-empty document.
func (e *lineEncoder) encodeDoc(v jsonValue, d *keyDocs) error {
	first := len(d.lens)
	for _, text := range v.texts {
		if e.splitter == nil || v.list {
			if err := e.encodeSeq(text, d); err != nil {
				return err
			}
			continue
		}
		for _, s := range e.splitter.Tokenize(text) {
			if err := e.encodeSeq(strings.TrimSpace(s.Text), d); err != nil {
				return err
			}
		}
	}
	if e.eod >= 0 && len(d.lens) > first {
		d.ids = append(d.ids, e.eod)
		d.lens[len(d.lens)-1]++
	}
	d.docEnds = append(d.docEnds, len(d.lens))
	return nil
}

func (e *lineEncoder) encodeSeq(text string, d *keyDocs) error {
	var ids []int32
	if e.strict != nil {
		var err error
		if ids, err = e.strict.EncodeStrict(text); err != nil {
			return err
		}
	} else {
		ids = e.tok.Encode(text)
	}
	if len(ids) > 0 {
		d.ids = append(d.ids, ids...)
		d.lens = append(d.lens, len(ids))
	}
	return nil
}

// keyDocs holds the documents of one JSON key for a batch of lines, flattened: the ids of all
// sequences back to back, each sequence's length, and after each document the number of
// sequences so far.
type keyDocs struct {
	ids     []int32
	lens    []int
	docEnds []int
}

func (d *keyDocs) truncate(to keyDocs) {
	d.ids, d.lens, d.docEnds = d.ids[:len(to.ids)], d.lens[:len(to.lens)], d.docEnds[:len(to.docEnds)]
}

// write adds d's documents to b.
func (d *keyDocs) write(b *IndexedBuilder) error {
	seq, tok := 0, 0
	for _, end := range d.docEnds {
		n := 0
		for _, l := range d.lens[seq:end] {
			n += l
		}
		if err := b.AddDocument(d.ids[tok:tok+n], d.lens[seq:end]); err != nil {
			return err
		}
		seq, tok = end, tok+n
	}
	return nil
}
