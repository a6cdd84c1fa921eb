package corpus_test

import (
	"fmt"

	"megago/examples/internal/corpus"
)

// Go source split into sentences for BERT and T5: one line each, blank lines kept with
// the line before.
func Example() {
	fmt.Printf("%q\n", corpus.Lines("package p\n\nfunc f() {\n}\n"))
	// Output:
	// ["package p\n\n" "func f() {\n" "}\n"]
}
