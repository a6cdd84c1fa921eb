package settings

import (
	"flag"

	"megago/data"
)

// registerHFTokenizer adds the Hugging Face tokenizer's flags and the NullTokenizer's.
func (c *Common) registerHFTokenizer(fs *flag.FlagSet) {
	fs.StringVar(&c.TokenizerModel, "tokenizer-model", c.TokenizerModel, "HuggingFaceTokenizer: directory holding tokenizer.json and tokenizer_config.json")
	fs.BoolVar(&c.HFNoSpecialTokens, "tokenizer-hf-no-include-special-tokens", c.HFNoSpecialTokens, "HuggingFaceTokenizer: leave out the post-processor's special tokens (BOS)")
	fs.IntVar(&c.NullVocabSize, "vocab-size", c.NullVocabSize, "NullTokenizer: vocabulary size (its EOD is vocab-size - 1)")
}

// Tokenizer returns the tokenizer settings of the flags (without --vocab-extra-ids).
func (c *Common) Tokenizer() data.TokenizerConfig {
	return data.TokenizerConfig{Type: c.TokenizerType, VocabFile: c.VocabFile, MergeFile: c.MergeFile,
		TokenizerModel: c.TokenizerModel, HFNoSpecialTokens: c.HFNoSpecialTokens, VocabSize: c.NullVocabSize}
}
