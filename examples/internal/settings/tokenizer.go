package settings

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"megago/data"
)

// registerHFTokenizer adds the Hugging Face and SentencePiece tokenizers' flags, the
// NullTokenizer's and the TikTokenizer's.
func (c *Common) registerHFTokenizer(fs *flag.FlagSet) {
	fs.StringVar(&c.TokenizerModel, "tokenizer-model", c.TokenizerModel, "HuggingFaceTokenizer: directory holding tokenizer.json and tokenizer_config.json; Llama2Tokenizer, GPTSentencePieceTokenizer, SentencePieceTokenizer: a SentencePiece .model file")
	fs.BoolVar(&c.HFNoSpecialTokens, "tokenizer-hf-no-include-special-tokens", c.HFNoSpecialTokens, "HuggingFaceTokenizer: leave out the post-processor's special tokens (BOS)")
	fs.BoolVar(&c.LegacyTokenizer, "legacy-tokenizer", c.LegacyTokenizer, "Megatron's legacy tokenizers: Llama2Tokenizer adds BOS before every text")
	fs.IntVar(&c.NullVocabSize, "vocab-size", c.NullVocabSize, "NullTokenizer: vocabulary size (its EOD is vocab-size - 1); TikTokenizer: number of ids, special tokens included (0: 131072)")
	c.registerTikToken(fs)
}

// registerTikToken adds the TikTokenizer's flags (--tokenizer-model and --vocab-size are
// registerHFTokenizer's).
func (c *Common) registerTikToken(fs *flag.FlagSet) {
	fs.StringVar(&c.TiktokenPattern, "tiktoken-pattern", c.TiktokenPattern, "TikTokenizer: pre-tokenizer pattern, v1 or v2")
	fs.Func("tiktoken-num-special-tokens", fmt.Sprintf("TikTokenizer: number of special tokens, the first ids (default %d)", c.TiktokenNumSpecialTokens),
		data.TikTokenNumSpecialFlag(&c.TiktokenNumSpecialTokens))
	special := (*dataPath)(&c.SpecialTokens) // a list of words, as --data-path
	fs.Var(special, "tokenizer-special-tokens", "TikTokenizer: special tokens in id order, which must include <unk> <s> </s> <mask> <pad> <cls> <sep> (the default)")
	fs.Var(special, "tiktoken-special-tokens", "TikTokenizer: Megatron's older name of --tokenizer-special-tokens")
}

// Tokenizer returns the tokenizer settings of the flags (without --vocab-extra-ids).
func (c *Common) Tokenizer() data.TokenizerConfig {
	return data.TokenizerConfig{Type: c.TokenizerType, VocabFile: c.VocabFile, MergeFile: c.MergeFile,
		TokenizerModel: c.TokenizerModel, HFNoSpecialTokens: c.HFNoSpecialTokens, LegacyTokenizer: c.LegacyTokenizer,
		VocabSize: c.NullVocabSize, TiktokenPattern: c.TiktokenPattern, TiktokenNumSpecialTokens: c.TiktokenNumSpecialTokens,
		SpecialTokens: c.SpecialTokens}
}

// TokenizerArgs returns the tokenizer flags beyond --tokenizer-type, --vocab-file and
// --merge-file that are set, as megago preprocess takes them ("" if none): what else
// decides the ids a text gets.
func (c *Common) TokenizerArgs() string {
	var args []string
	if c.TokenizerModel != "" {
		args = append(args, "-tokenizer-model", c.TokenizerModel)
	}
	if c.HFNoSpecialTokens {
		args = append(args, "-tokenizer-hf-no-include-special-tokens")
	}
	if c.LegacyTokenizer {
		args = append(args, "-legacy-tokenizer")
	}
	if c.NullVocabSize != 0 {
		args = append(args, "-vocab-size", strconv.Itoa(c.NullVocabSize))
	}
	if c.TokenizerType == "TikTokenizer" {
		args = append(args, "-tiktoken-pattern", c.TiktokenPattern, "-tiktoken-num-special-tokens", strconv.Itoa(c.TiktokenNumSpecialTokens))
		if len(c.SpecialTokens) > 0 {
			args = append(args, "-tokenizer-special-tokens", strings.Join(c.SpecialTokens, " "))
		}
	}
	return strings.Join(args, " ")
}
