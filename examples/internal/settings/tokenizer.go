package settings

import (
	"flag"
	"strings"

	"megago/data"
)

// registerHFTokenizer adds the Hugging Face tokenizer's flags, the NullTokenizer's and
// the TikTokenizer's.
func (c *Common) registerHFTokenizer(fs *flag.FlagSet) {
	fs.StringVar(&c.TokenizerModel, "tokenizer-model", c.TokenizerModel, "HuggingFaceTokenizer: directory holding tokenizer.json and tokenizer_config.json")
	fs.BoolVar(&c.HFNoSpecialTokens, "tokenizer-hf-no-include-special-tokens", c.HFNoSpecialTokens, "HuggingFaceTokenizer: leave out the post-processor's special tokens (BOS)")
	fs.IntVar(&c.NullVocabSize, "vocab-size", c.NullVocabSize, "NullTokenizer: vocabulary size (its EOD is vocab-size - 1); TikTokenizer: number of ids, special tokens included (0: 131072)")
	c.registerTikToken(fs)
}

// registerTikToken adds the TikTokenizer's flags (--tokenizer-model and --vocab-size are
// registerHFTokenizer's).
func (c *Common) registerTikToken(fs *flag.FlagSet) {
	fs.StringVar(&c.TiktokenPattern, "tiktoken-pattern", c.TiktokenPattern, "TikTokenizer: pre-tokenizer pattern, v1 or v2")
	fs.IntVar(&c.TiktokenNumSpecialTokens, "tiktoken-num-special-tokens", c.TiktokenNumSpecialTokens, "TikTokenizer: number of special tokens, the first ids")
	special := func(s string) error {
		c.SpecialTokens = append(c.SpecialTokens, strings.Fields(s)...)
		return nil
	}
	fs.Func("tokenizer-special-tokens", "TikTokenizer: special tokens in id order, which must include <unk> <s> </s> <mask> <pad> <cls> <sep> (the default)", special)
	fs.Func("tiktoken-special-tokens", "TikTokenizer: Megatron's older name of --tokenizer-special-tokens", special)
}

// Tokenizer returns the tokenizer settings of the flags (without --vocab-extra-ids).
func (c *Common) Tokenizer() data.TokenizerConfig {
	return data.TokenizerConfig{Type: c.TokenizerType, VocabFile: c.VocabFile, MergeFile: c.MergeFile,
		TokenizerModel: c.TokenizerModel, HFNoSpecialTokens: c.HFNoSpecialTokens, VocabSize: c.NullVocabSize,
		TiktokenPattern: c.TiktokenPattern, TiktokenNumSpecialTokens: c.TiktokenNumSpecialTokens, SpecialTokens: c.SpecialTokens}
}
