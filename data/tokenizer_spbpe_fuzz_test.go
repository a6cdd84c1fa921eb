package data

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// spProtoPiece is one piece of a hand-made ModelProto.
type spProtoPiece struct {
	piece string
	score float32
	typ   uint64
}

// spProto serializes a ModelProto with the pieces, trainer_spec.model_type and
// byte_fallback, and normalizer_spec.add_dummy_prefix.
func spProto(modelType uint64, byteFallback, dummyPrefix bool, pieces ...spProtoPiece) []byte {
	var b []byte
	for _, p := range pieces {
		var sp []byte
		sp = protowire.AppendTag(sp, 1, protowire.BytesType)
		sp = protowire.AppendString(sp, p.piece)
		sp = protowire.AppendTag(sp, 2, protowire.Fixed32Type)
		sp = protowire.AppendFixed32(sp, math.Float32bits(p.score))
		sp = protowire.AppendTag(sp, 3, protowire.VarintType)
		sp = protowire.AppendVarint(sp, p.typ)
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, sp)
	}
	var ts []byte
	ts = protowire.AppendTag(ts, 3, protowire.VarintType)
	ts = protowire.AppendVarint(ts, modelType)
	ts = protowire.AppendTag(ts, 35, protowire.VarintType)
	ts = protowire.AppendVarint(ts, protowire.EncodeBool(byteFallback))
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, ts)
	var ns []byte
	ns = protowire.AppendTag(ns, 3, protowire.VarintType)
	ns = protowire.AppendVarint(ns, protowire.EncodeBool(dummyPrefix))
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	return protowire.AppendBytes(b, ns)
}

// FuzzSentencePieceModel feeds arbitrary .model bytes and text to the SentencePiece
// reader. A rejection must be an error with a message, never a panic; an accepted model
// must encode to ids in [0, VocabSize) and decode them; an accepted BPE model must give
// the same ids word by word through the cache, with mergeSimple and with mergeHeap over
// the whole text (the last is bpe_model.cc's loop).
func FuzzSentencePieceModel(f *testing.F) {
	for _, name := range spbpeModels {
		b, err := os.ReadFile(filepath.Join(spbpeDir, name+".model"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "Hello  wörld <s>龘😀\t▁x ")
	}
	f.Add(spProto(spModelBPE, false, true,
		spProtoPiece{"<unk>", 0, spUnknown}, spProtoPiece{"<s>", 0, spControl}, spProtoPiece{"a", -1, spNormal},
		spProtoPiece{"▁", -1, spNormal}, spProtoPiece{"▁a", -2, spNormal}, spProtoPiece{"aa", -2, spUnused},
		spProtoPiece{"a▁", -3, spNormal}, spProtoPiece{"x", 0, spUserDefined}, spProtoPiece{"▁▁", -1, spNormal}), "aa a  xaa ab")
	f.Add(spProto(spModelBPE, true, false,
		spProtoPiece{"<unk>", 0, spUnknown}, spProtoPiece{"<0x41>", 0, spByte}, spProtoPiece{"ab", 1, spNormal}), "ab")
	f.Add(spProto(spModelUnigram, false, true, spProtoPiece{"<unk>", 0, spUnknown}, spProtoPiece{"▁", -1, spNormal}), "a b")
	f.Add([]byte{0x0a, 0x05, 0x0a, 0x03}, "")
	f.Fuzz(func(t *testing.T, model []byte, text string) {
		tok, err := NewSentencePiece(model, 0)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("rejected with an empty message")
			}
			return
		}
		ids := encodeInRange(t, tok, text)
		if _, ok := tok.model.(*spBPE); !ok || slices.ContainsFunc(tok.scores, func(s float32) bool { return s != s }) {
			return // NaN scores have no order; SentencePiece's queue is then arbitrary too
		}
		for _, simpleMax := range []int{0, math.MaxInt} {
			v, err := NewSentencePiece(model, 0)
			if err != nil {
				t.Fatal(err)
			}
			b := v.model.(*spBPE)
			b.split, b.simpleMax = "", simpleMax
			if got := v.Encode(text); !slices.Equal(got, ids) {
				t.Fatalf("Encode(%q) = %v, whole text with simpleMax %d: %v", text, ids, simpleMax, got)
			}
		}
	})
}
