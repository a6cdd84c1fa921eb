package data

import (
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// This file reads SentencePiece's .model file, a serialized ModelProto
// (sentencepiece_model.proto), with protowire: only the fields the tokenizer needs are
// decoded and everything else is skipped, so no generated code is needed.

// Piece types of ModelProto.SentencePiece.Type.
const (
	spNormal      = 1
	spUnknown     = 2
	spControl     = 3
	spUserDefined = 4
	spUnused      = 5
	spByte        = 6
)

// TrainerSpec.ModelType values.
const (
	spModelUnigram = 1
	spModelBPE     = 2
	spModelWord    = 3
)

// spModelProto holds the decoded fields of a ModelProto, with proto2 defaults applied.
type spModelProto struct {
	pieces []string
	scores []float32
	types  []uint8

	// TrainerSpec
	modelType                               int
	byteFallback, treatWhitespaceAsSuffix   bool
	unkPiece, bosPiece, eosPiece, padPiece  string
	unkSurface                              string
	addDummyPrefix, removeExtraWS, escapeWS bool   // NormalizerSpec
	normalizerName                          string // NormalizerSpec.name
	charsMap                                []byte // NormalizerSpec.precompiled_charsmap
	hasDenormalizer                         bool   // a denormalizer_spec with a charsmap
}

// parseSPModel decodes a serialized ModelProto.
func parseSPModel(b []byte) (*spModelProto, error) {
	m := &spModelProto{
		modelType: spModelUnigram, unkPiece: "<unk>", bosPiece: "<s>", eosPiece: "</s>", padPiece: "<pad>",
		unkSurface: " \u2047 ", addDummyPrefix: true, removeExtraWS: true, escapeWS: true,
	}
	err := protoFields(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			if err := m.parsePiece(v); err != nil {
				return fmt.Errorf("pieces[%d]: %w", len(m.pieces), err)
			}
		case num == 2 && typ == protowire.BytesType:
			if err := protoFields(v, m.trainerField); err != nil {
				return fmt.Errorf("trainer_spec: %w", err)
			}
		case num == 3 && typ == protowire.BytesType:
			if err := protoFields(v, m.normalizerField); err != nil {
				return fmt.Errorf("normalizer_spec: %w", err)
			}
		case num == 5 && typ == protowire.BytesType:
			err := protoFields(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if num == 2 && typ == protowire.BytesType && len(v) > 0 {
					m.hasDenormalizer = true
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("denormalizer_spec: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(m.pieces) == 0 {
		return nil, errors.New("no pieces")
	}
	return m, nil
}

func (m *spModelProto) parsePiece(b []byte) error {
	piece, score, typ := "", float32(0), uint8(spNormal)
	err := protoFields(b, func(num protowire.Number, wt protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && wt == protowire.BytesType:
			piece = string(v)
		case num == 2 && wt == protowire.Fixed32Type:
			score = math.Float32frombits(uint32(x))
		case num == 3 && wt == protowire.VarintType:
			if x < spNormal || x > spByte {
				return fmt.Errorf("unknown type %d", x)
			}
			typ = uint8(x)
		}
		return nil
	})
	if err != nil {
		return err
	}
	m.pieces, m.scores, m.types = append(m.pieces, piece), append(m.scores, score), append(m.types, typ)
	return nil
}

func (m *spModelProto) trainerField(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
	if typ == protowire.VarintType {
		switch num {
		case 3:
			m.modelType = int(x)
		case 24:
			m.treatWhitespaceAsSuffix = x != 0
		case 35:
			m.byteFallback = x != 0
		}
		return nil
	}
	if typ == protowire.BytesType {
		switch num {
		case 44:
			m.unkSurface = string(v)
		case 45:
			m.unkPiece = string(v)
		case 46:
			m.bosPiece = string(v)
		case 47:
			m.eosPiece = string(v)
		case 48:
			m.padPiece = string(v)
		}
	}
	return nil
}

func (m *spModelProto) normalizerField(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
	switch {
	case num == 1 && typ == protowire.BytesType:
		m.normalizerName = string(v)
	case num == 2 && typ == protowire.BytesType:
		m.charsMap = v
	case num == 3 && typ == protowire.VarintType:
		m.addDummyPrefix = x != 0
	case num == 4 && typ == protowire.VarintType:
		m.removeExtraWS = x != 0
	case num == 5 && typ == protowire.VarintType:
		m.escapeWS = x != 0
	}
	return nil
}

// protoFields calls f with each field of the message b: its number, wire type, and its
// value as bytes (length-delimited fields) or as an integer (varint and fixed fields).
func protoFields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("malformed protobuf tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var x32 uint32
			x32, n = protowire.ConsumeFixed32(b)
			x = uint64(x32)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("malformed protobuf field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}
