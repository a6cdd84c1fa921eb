package corpus_test

import (
	"fmt"

	"megago/data"
	"megago/examples/internal/corpus"
)

// Go source split into sentences for BERT, and the special tokens BERT needs added to
// the example vocabulary.
func Example() {
	fmt.Printf("%q\n", corpus.Lines("package p\n\nfunc f() {\n}\n"))
	tok := corpus.Extend(data.GoSourceBPE(), corpus.CLS, corpus.SEP, corpus.Mask, corpus.Pad)
	s := tok.Special()
	fmt.Println(tok.VocabSize(), s.CLS, s.SEP, s.Mask, s.Pad, s.EOD)
	fmt.Println(tok.Decode(append([]int32{s.CLS, s.Mask}, tok.Encode(" = 1")...)))
	// Output:
	// ["package p\n\n" "func f() {\n" "}\n"]
	// 8196 8192 8193 8194 8195 8191
	// [CLS][MASK] = 1
}
