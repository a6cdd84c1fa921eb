package settings

import (
	"flag"
	"strconv"
	"strings"

	"megago/data"
)

// registerHFTokenizer adds the Hugging Face and SentencePiece tokenizers' flags and the
// NullTokenizer's.
func (c *Common) registerHFTokenizer(fs *flag.FlagSet) {
	fs.StringVar(&c.TokenizerModel, "tokenizer-model", c.TokenizerModel, "HuggingFaceTokenizer: directory holding tokenizer.json and tokenizer_config.json; Llama2Tokenizer, GPTSentencePieceTokenizer, SentencePieceTokenizer: a SentencePiece .model file")
	fs.BoolVar(&c.HFNoSpecialTokens, "tokenizer-hf-no-include-special-tokens", c.HFNoSpecialTokens, "HuggingFaceTokenizer: leave out the post-processor's special tokens (BOS)")
	fs.BoolVar(&c.LegacyTokenizer, "legacy-tokenizer", c.LegacyTokenizer, "Megatron's legacy tokenizers: Llama2Tokenizer adds BOS before every text")
	fs.IntVar(&c.NullVocabSize, "vocab-size", c.NullVocabSize, "NullTokenizer: vocabulary size (its EOD is vocab-size - 1)")
}

// Tokenizer returns the tokenizer settings of the flags (without --vocab-extra-ids).
func (c *Common) Tokenizer() data.TokenizerConfig {
	return data.TokenizerConfig{Type: c.TokenizerType, VocabFile: c.VocabFile, MergeFile: c.MergeFile,
		TokenizerModel: c.TokenizerModel, HFNoSpecialTokens: c.HFNoSpecialTokens, LegacyTokenizer: c.LegacyTokenizer,
		VocabSize: c.NullVocabSize}
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
	return strings.Join(args, " ")
}
