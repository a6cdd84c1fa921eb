package data_test

import (
	"fmt"
	"log"
	"strings"

	"megago/data"
)

// Example_tokenizers builds tokenizers the way Megatron's --tokenizer-type names them and
// encodes one sentence with each.
func Example_tokenizers() {
	for _, cfg := range []data.TokenizerConfig{
		{Type: "gpt2"},         // GPT-2's vocabulary, built in
		{Type: "gosource-bpe"}, // megago's small example vocabulary
		{Type: "BertWordPieceLowerCase", VocabFile: "testdata/tokenizer/bert_vocab.txt"},
		{Type: "SentencePieceTokenizer", VocabFile: "testdata/tokenizer/spm/nfkc.model", VocabExtraIDs: 100},
		{Type: "NullTokenizer", VocabSize: 10},
	} {
		tok, err := data.NewTokenizer(cfg)
		if err != nil {
			log.Fatal(err)
		}
		text := "The quick brown fox."
		if cfg.Type == "NullTokenizer" {
			text = "3 1 4 1 5"
		}
		ids := tok.Encode(text)
		fmt.Printf("%s: %d ids, vocab %d, EOD %d: %q\n", cfg.Type, len(ids), tok.VocabSize(), tok.Special().EOD, tok.Decode(ids))
	}
	// Output:
	// gpt2: 5 ids, vocab 50257, EOD 50256: "The quick brown fox."
	// gosource-bpe: 9 ids, vocab 8192, EOD 8191: "The quick brown fox."
	// BertWordPieceLowerCase: 5 ids, vocab 39, EOD 37: "the quick brown fox ."
	// SentencePieceTokenizer: 10 ids, vocab 400, EOD 1: "The quick brown fox."
	// NullTokenizer: 5 ids, vocab 10, EOD 9: "3 1 4 1 5"
}

// ExampleTrainBPE trains a byte-level BPE vocabulary on a tiny corpus and encodes with it.
// "w e" is the most frequent pair (40: lower, lowest, newer, newest), then "l o" (30),
// "Ġ lo" (29); then seven pairs tie at 20 and the smallest left id wins: e (68), n (77), s
// (82). New ids start at 256; " lowest" is Ġlo (258) we (256) st (261).
func ExampleTrainBPE() {
	corpus := strings.Repeat("low lower lowest newer newest ", 10)
	tok, err := data.TrainBPE(strings.NewReader(corpus), 256+6+1)
	if err != nil {
		log.Fatal(err)
	}
	var merges strings.Builder
	if err := tok.WriteMerges(&merges); err != nil {
		log.Fatal(err)
	}
	fmt.Print(merges.String())
	fmt.Println(tok.Encode(" lowest"), tok.Special().EOD)
	// Output:
	// #version: 0.2
	// w e
	// l o
	// Ġ lo
	// e we
	// n ewe
	// s t
	// [258 256 261] 262
}
