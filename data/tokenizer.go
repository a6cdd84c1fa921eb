package data

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Tokenizer turns text into token ids and back. Implementations: GPT-2 byte-level BPE
// (files or the built-in "gpt2" vocabulary), BERT WordPiece, SentencePiece (unigram and
// BPE), Hugging Face tokenizer.json files, and Megatron's NullTokenizer. Implementations
// are safe for concurrent use.
type Tokenizer interface {
	// Encode returns the ids of text.
	Encode(text string) []int32
	// Decode returns the text of ids.
	Decode(ids []int32) string
	// VocabSize returns the number of ids (before any padding for tensor parallelism).
	VocabSize() int
	// Special returns the ids of the special tokens; -1 where the tokenizer has none.
	Special() SpecialIDs
}

// SpecialIDs are a tokenizer's special tokens; -1 means "none".
type SpecialIDs struct {
	EOD, Pad, Mask, CLS, SEP, BOS, EOS int32
	// Sentinels are T5's <extra_id_0>, <extra_id_1>, ... in that order.
	Sentinels []int32
}

// NoSpecial returns SpecialIDs with every id -1.
func NoSpecial() SpecialIDs {
	return SpecialIDs{EOD: -1, Pad: -1, Mask: -1, CLS: -1, SEP: -1, BOS: -1, EOS: -1}
}

// TokenizerConfig names a tokenizer the way Megatron's flags do.
type TokenizerConfig struct {
	// Type is Megatron's --tokenizer-type: GPT2BPETokenizer, BertWordPieceLowerCase,
	// BertWordPieceCase, SentencePieceTokenizer, GPTSentencePieceTokenizer,
	// Llama2Tokenizer, HuggingFaceTokenizer, TikTokenizer, NullTokenizer; or "gpt2" for the
	// built-in GPT-2 vocabulary and "gosource-bpe" for megago's example vocabulary, which
	// need no files.
	Type      string
	VocabFile string // vocab.json, vocab.txt or a SentencePiece .model
	MergeFile string // merges.txt (GPT-2 BPE)
	// VocabSize is Megatron's --vocab-size: NullTokenizer's vocabulary size, and
	// TikTokenizer's number of ids (0: 131072).
	VocabSize int
	// TokenizerModel is Megatron's --tokenizer-model: HuggingFaceTokenizer's directory
	// holding tokenizer.json and tokenizer_config.json; the SentencePiece .model file of
	// Llama2Tokenizer, GPTSentencePieceTokenizer and SentencePieceTokenizer (which also
	// takes it as VocabFile); TikTokenizer's JSON vocabulary.
	TokenizerModel string
	// TiktokenPattern, TiktokenNumSpecialTokens and SpecialTokens are TikTokenizer's
	// --tiktoken-pattern, --tiktoken-num-special-tokens and --tokenizer-special-tokens
	// (see TikTokenConfig; zero values are Megatron's defaults).
	TiktokenPattern          string
	TiktokenNumSpecialTokens int
	SpecialTokens            []string
	// HFNoSpecialTokens is Megatron's --tokenizer-hf-no-include-special-tokens:
	// HuggingFaceTokenizer leaves out its post-processor's special tokens (BOS).
	HFNoSpecialTokens bool
	// LegacyTokenizer is Megatron's --legacy-tokenizer (its tokenizers before 2026, removed
	// since): Llama2Tokenizer adds BOS before every text, as the legacy
	// _Llama2Tokenizer.tokenize did; current Megatron adds nothing. Other tokenizers ignore
	// it.
	LegacyTokenizer bool
	// VocabExtraIDs is Megatron's --vocab-extra-ids: the number of T5 sentinels
	// <extra_id_0>, <extra_id_1>, ... added after a WordPiece or SentencePiece vocabulary
	// (T5 uses 100). Other tokenizers, which Megatron does not extend, get ForT5's
	// additions: a pad token if they have none, EOS = EOD, and the sentinels in order.
	VocabExtraIDs int
}

// NewTokenizer builds the tokenizer cfg names, reading its files, with cfg.VocabExtraIDs
// sentinels (see TokenizerConfig). Errors name the file.
func NewTokenizer(cfg TokenizerConfig) (Tokenizer, error) {
	if f, ok := tokenizerTypes[cfg.Type]; ok {
		t, err := f(cfg)
		if err != nil || cfg.VocabExtraIDs <= 0 || len(t.Special().Sentinels) > 0 {
			return t, err
		}
		return ForT5(t, cfg.VocabExtraIDs)
	}
	names := make([]string, 0, len(tokenizerTypes))
	for n := range tokenizerTypes {
		names = append(names, n)
	}
	return nil, fmt.Errorf("data: unknown tokenizer type %q (known: %s)", cfg.Type, strings.Join(slices.Sorted(slices.Values(names)), ", "))
}

// tokenizerTypes maps --tokenizer-type names to constructors; each tokenizer's file adds
// its entries in an init function. It is a constant table once init has run.
var tokenizerTypes = map[string]func(TokenizerConfig) (Tokenizer, error){
	"NullTokenizer": func(c TokenizerConfig) (Tokenizer, error) { return NewNullTokenizer(c.VocabSize) },
}

// NullTokenizer is Megatron's tokenizer for pre-tokenized text: the text is ids separated
// by single spaces. Its EOD id is vocabSize − 1 (current Megatron; older releases used
// vocabSize).
type NullTokenizer struct{ vocab int }

// NewNullTokenizer returns a NullTokenizer for a vocabulary of vocabSize ids.
func NewNullTokenizer(vocabSize int) (*NullTokenizer, error) {
	if vocabSize < 1 {
		return nil, fmt.Errorf("data: NullTokenizer needs a vocabulary size (--vocab-size) ≥ 1, got %d", vocabSize)
	}
	return &NullTokenizer{vocab: vocabSize}, nil
}

// Encode parses text as integers separated by single spaces. Fields that are not integers
// in [0, VocabSize) are skipped; EncodeStrict reports them.
func (t *NullTokenizer) Encode(text string) []int32 {
	ids, _ := t.EncodeStrict(text)
	return ids
}

// EncodeStrict is Encode that returns an error naming the first bad field.
func (t *NullTokenizer) EncodeStrict(text string) ([]int32, error) {
	if text == "" {
		return nil, nil
	}
	var ids []int32
	var firstErr error
	for i, f := range strings.Split(text, " ") {
		v, err := strconv.ParseInt(f, 10, 32)
		if err != nil || v < 0 || int(v) >= t.vocab {
			if firstErr == nil {
				firstErr = fmt.Errorf("data: NullTokenizer: field %d %q is not an id in [0, %d)", i, f, t.vocab)
			}
			continue
		}
		ids = append(ids, int32(v))
	}
	return ids, firstErr
}

// Decode writes the ids separated by single spaces.
func (t *NullTokenizer) Decode(ids []int32) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id))
	}
	return strings.Join(parts, " ")
}

// VocabSize returns the vocabulary size.
func (t *NullTokenizer) VocabSize() int { return t.vocab }

// Special returns EOD = VocabSize − 1 and nothing else.
func (t *NullTokenizer) Special() SpecialIDs {
	s := NoSpecial()
	s.EOD = int32(t.vocab - 1)
	return s
}
