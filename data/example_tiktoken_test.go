package data_test

import (
	"fmt"
	"log"

	"megago/data"
)

// ExampleLoadTikTokenizer reads a tiktoken vocabulary in Megatron's JSON list format, as
// --tokenizer-type TikTokenizer --tokenizer-model FILE --vocab-size 9000 does: 1000
// special tokens, then the file's first 8000 ranks. "<s>" in the text is BOS.
func ExampleLoadTikTokenizer() {
	tok, err := data.LoadTikTokenizer("testdata/tiktoken/o200k_8000.json.gz", data.TikTokenConfig{Pattern: "v2", VocabSize: 9000})
	if err != nil {
		log.Fatal(err)
	}
	ids := tok.Encode("<s>Hello, world!")
	s := tok.Special()
	fmt.Println(ids[0] == s.BOS, tok.Decode(ids[1:]), s.EOD, tok.VocabSize())
	// Output: true Hello, world! 2 9000
}
