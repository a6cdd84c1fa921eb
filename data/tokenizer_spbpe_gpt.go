package data

import (
	"errors"
	"fmt"
)

func init() {
	tokenizerTypes["GPTSentencePieceTokenizer"] = func(c TokenizerConfig) (Tokenizer, error) {
		return loadGPTSentencePiece("GPTSentencePieceTokenizer", c.TokenizerModel, false)
	}
	tokenizerTypes["Llama2Tokenizer"] = func(c TokenizerConfig) (Tokenizer, error) {
		return loadGPTSentencePiece("Llama2Tokenizer", c.TokenizerModel, c.LegacyTokenizer)
	}
}

// GPTSentencePiece is Megatron's GPTSentencePieceTokenizer and Llama2Tokenizer: a
// SentencePiece model (typically BPE with byte fallback, as Llama 2's tokenizer.model)
// given as --tokenizer-model, encoding text as SentencePiece's encode_as_ids does — no BOS
// or EOS, special-looking text encoded literally — and decoding with decode_ids. Its
// special ids are the model's: BOS, EOS and Pad are SentencePieceProcessor's bos_id,
// eos_id and pad_id (-1 where the model has none), EOD is EOS, CLS, SEP and Mask are -1,
// and there are no sentinels. With addBOS every Encode starts with BOS, as Megatron's
// legacy _Llama2Tokenizer.tokenize(s, bos=True, eos=False) did (see TokenizerConfig's
// LegacyTokenizer). A GPTSentencePiece is immutable and safe for concurrent use.
type GPTSentencePiece struct {
	sp     *SentencePiece
	addBOS bool
}

// LoadGPTSentencePiece reads a SentencePiece .model file. Errors name the file.
func LoadGPTSentencePiece(modelFile string, addBOS bool) (*GPTSentencePiece, error) {
	return loadGPTSentencePiece("GPTSentencePiece", modelFile, addBOS)
}

// loadGPTSentencePiece is LoadGPTSentencePiece with the tokenizer type errors name.
func loadGPTSentencePiece(typ, modelFile string, addBOS bool) (*GPTSentencePiece, error) {
	if modelFile == "" {
		return nil, fmt.Errorf("data: %s needs --tokenizer-model FILE.model (a SentencePiece model)", typ)
	}
	sp, err := LoadSentencePiece(modelFile, 0)
	if err != nil {
		return nil, err
	}
	t, err := newGPTSentencePiece(sp, addBOS)
	if err != nil {
		return nil, fmt.Errorf("data: %s %s: %w", typ, modelFile, err)
	}
	return t, nil
}

// NewGPTSentencePiece is LoadGPTSentencePiece from the bytes of a .model file.
func NewGPTSentencePiece(model []byte, addBOS bool) (*GPTSentencePiece, error) {
	sp, err := NewSentencePiece(model, 0)
	if err != nil {
		return nil, err
	}
	return newGPTSentencePiece(sp, addBOS)
}

func newGPTSentencePiece(sp *SentencePiece, addBOS bool) (*GPTSentencePiece, error) {
	if addBOS && sp.special.BOS < 0 {
		return nil, errors.New("the model has no BOS piece (trainer_spec.bos_piece as a control piece) to add")
	}
	return &GPTSentencePiece{sp: sp, addBOS: addBOS}, nil
}

// Encode returns the ids of text, after BOS if the tokenizer adds it.
func (t *GPTSentencePiece) Encode(text string) []int32 {
	var ids []int32
	if t.addBOS {
		ids = append(ids, t.sp.special.BOS)
	}
	return t.sp.model.appendIDs(ids, t.sp.norm.normalize(text))
}

// Decode is SentencePiece's DecodeIds (BOS, EOS and other control pieces vanish). It
// panics if an id is outside [0, VocabSize).
func (t *GPTSentencePiece) Decode(ids []int32) string { return t.sp.Decode(ids) }

// VocabSize returns the number of pieces.
func (t *GPTSentencePiece) VocabSize() int { return len(t.sp.pieces) }

// Special returns the model's BOS, EOS (also EOD) and pad ids.
func (t *GPTSentencePiece) Special() SpecialIDs {
	s := NoSpecial()
	s.BOS, s.EOS, s.Pad, s.EOD = t.sp.special.BOS, t.sp.special.EOS, t.sp.special.Pad, t.sp.special.EOS
	return s
}
