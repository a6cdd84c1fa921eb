package data

import (
	"slices"
	"strings"
	"testing"
)

// ForT5 on megago's example vocabulary: 8192 ids with EOD 8191, then <pad> and the
// sentinels in order, the same through NewTokenizer's VocabExtraIDs.
func TestForT5GoSource(t *testing.T) {
	direct, err := ForT5(GoSourceBPE(), 100)
	if err != nil {
		t.Fatal(err)
	}
	named, err := NewTokenizer(TokenizerConfig{Type: "gosource-bpe", VocabExtraIDs: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []Tokenizer{direct, named} {
		s := tok.Special()
		if tok.VocabSize() != 8192+1+100 || s.Pad != 8192 || s.EOS != 8191 || s.EOD != 8191 || s.BOS != -1 || s.Mask != -1 {
			t.Fatalf("vocab %d, special %+v", tok.VocabSize(), s)
		}
		if len(s.Sentinels) != 100 || s.Sentinels[0] != 8193 || s.Sentinels[99] != 8292 {
			t.Fatalf("sentinels %v", s.Sentinels)
		}
		text := "func (b *Buffer) <extra_id_0>() int { return len(b.buf) <extra_id_1> }<pad>"
		ids := tok.Encode(text)
		if got := tok.Decode(ids); got != text {
			t.Fatalf("round trip: %q", got)
		}
		var added []int32
		for _, id := range ids {
			if id >= 8192 {
				added = append(added, id)
			}
		}
		if !slices.Equal(added, []int32{8193, 8194, 8192}) {
			t.Fatalf("added ids %v in %v", added, ids)
		}
	}
	plain, err := NewTokenizer(TokenizerConfig{Type: "gosource-bpe"})
	if err != nil || plain.VocabSize() != 8192 {
		t.Fatalf("without extra ids: %v, %v", plain, err)
	}
}

// Encoding splits the text at added names only; the rest goes to the base tokenizer.
func TestAddedTokensEncode(t *testing.T) {
	null, err := NewNullTokenizer(10) // EOD 9
	if err != nil {
		t.Fatal(err)
	}
	tok, err := AddSpecialTokens(null, AddedSpecial{Mask: "[MASK]", BOS: "<s>", ExtraIDs: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Added ids: [MASK] 10, <s> 11, <extra_id_0> 12, <extra_id_1> 13.
	for _, tc := range []struct {
		text string
		want []int32
	}{
		{"3 4<extra_id_1>5", []int32{3, 4, 13, 5}},
		{"<s>[MASK][MASK]<extra_id_0>", []int32{11, 10, 10, 12}},
		{"1 <extra_id_2> 2", []int32{1, 2}}, // not an added name: NullTokenizer skips the field
		{"7 <", []int32{7}},
		{"", nil},
	} {
		if got := tok.Encode(tc.text); !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
	if got := tok.Decode([]int32{3, 4, 13, 5, 11}); got != "3 4<extra_id_1>5<s>" {
		t.Errorf("Decode: %q", got)
	}
	s := tok.Special()
	if tok.VocabSize() != 14 || s.Mask != 10 || s.BOS != 11 || s.EOD != 9 || s.Pad != -1 || !slices.Equal(s.Sentinels, []int32{12, 13}) {
		t.Errorf("vocab %d, special %+v", tok.VocabSize(), s)
	}
	t5, err := ForT5(null, 1)
	if err != nil {
		t.Fatal(err)
	}
	if s := t5.Special(); s.Pad != 10 || s.EOS != 9 || !slices.Equal(s.Sentinels, []int32{11}) {
		t.Errorf("ForT5 special %+v", s)
	}
}

// BERT's tokens on megago's example vocabulary (8192 ids, EOD 8191) get ids in the
// order CLS, SEP, Mask, Pad whatever the order of the fields; the base's special ids
// stay, and an id past the added ones does not decode.
func TestAddSpecialTokensBERT(t *testing.T) {
	tok, err := AddSpecialTokens(GoSourceBPE(), AddedSpecial{Pad: "[PAD]", Mask: "[MASK]", SEP: "[SEP]", CLS: "[CLS]"})
	if err != nil {
		t.Fatal(err)
	}
	s := tok.Special()
	if tok.VocabSize() != 8196 || s.CLS != 8192 || s.SEP != 8193 || s.Mask != 8194 || s.Pad != 8195 ||
		s.EOD != 8191 || s.BOS != -1 || len(s.Sentinels) != 0 {
		t.Fatalf("vocab %d, special %+v", tok.VocabSize(), s)
	}
	if got := tok.Decode(append(append([]int32{s.CLS}, tok.Encode("func f()")...), s.Mask, s.SEP)); got != "[CLS]func f()[MASK][SEP]" {
		t.Errorf("Decode: %q", got)
	}
	if got, want := tok.Encode("x := 1"), GoSourceBPE().Encode("x := 1"); !slices.Equal(got, want) {
		t.Errorf("Encode of plain text %v, the base's %v", got, want)
	}
	defer func() {
		if recover() == nil {
			t.Error("Decode of id 8196 did not panic")
		}
	}()
	tok.Decode([]int32{8196})
}

func TestAddSpecialTokensErrors(t *testing.T) {
	null, _ := NewNullTokenizer(10)
	withPad, _ := AddSpecialTokens(null, AddedSpecial{Pad: "<pad>", ExtraIDs: 1})
	for _, tc := range []struct {
		name string
		base Tokenizer
		add  AddedSpecial
		want string
	}{
		{"undelimited", null, AddedSpecial{Pad: "pad"}, `name "pad" is not <...> or [...]`},
		{"closing inside", null, AddedSpecial{Pad: "<a>b>"}, "is not <...>"},
		{"twice", null, AddedSpecial{CLS: "[X]", SEP: "[X]"}, `name "[X]" given twice`},
		{"role taken", withPad, AddedSpecial{Pad: "<p2>"}, "already has pad id 10"},
		{"sentinels taken", withPad, AddedSpecial{ExtraIDs: 3}, "already has 1 sentinels"},
		{"negative", null, AddedSpecial{ExtraIDs: -1}, "negative number of extra ids"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := AddSpecialTokens(tc.base, tc.add)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}
