package data

import (
	"bytes"
	_ "embed" // the shipped vocabulary
	"sync"
)

//go:generate go run ./vocab/gen -out vocab

//go:embed vocab/vocab.json
var goSourceVocab []byte

//go:embed vocab/merges.txt
var goSourceMerges []byte

func init() {
	tokenizerTypes["gosource-bpe"] = func(TokenizerConfig) (Tokenizer, error) { return GoSourceBPE(), nil }
}

// GoSourceBPE returns the small vocabulary megago ships for its examples (the
// "gosource-bpe" tokenizer type): a GPT-2-format byte-level BPE of 8192 ids (256 bytes,
// 7935 merges, EOD = "<|endoftext|>" = 8191) trained by BPETrainer on Go standard-library
// sources. data/vocab holds its vocab.json and merges.txt, which are embedded in the
// binary, and data/vocab/README.md says how they were made (go generate ./data remakes
// them). Later calls return the same tokenizer; it panics if the embedded files are
// corrupt, which the tests rule out.
func GoSourceBPE() *GPT2BPE {
	t, err := goSourceBPE()
	if err != nil {
		panic("data: GoSourceBPE: embedded vocabulary: " + err.Error())
	}
	return t
}

var goSourceBPE = sync.OnceValues(func() (*GPT2BPE, error) {
	return ReadGPT2BPE(bytes.NewReader(goSourceVocab), bytes.NewReader(goSourceMerges))
})
