package data

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// This file builds an HFTokenizer's stages from the parts of tokenizer.json.

// buildModel reads model: the vocabulary and merges of a BPE.
func (t *HFTokenizer) buildModel(f *hfFile) error {
	m := &f.Model
	switch {
	case m.Type == "WordPiece":
		return t.buildWordPiece(f)
	case m.Type != "BPE" && !(m.Type == "" && m.Merges != nil):
		return fmt.Errorf("model.type %q is not supported (only BPE and WordPiece)", m.Type)
	case m.Dropout != nil && *m.Dropout > 0:
		return fmt.Errorf("model.dropout %g is not supported", *m.Dropout)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return fmt.Errorf("model.continuing_subword_prefix %q is not supported", *m.ContinuingSubwordPrefix)
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return fmt.Errorf("model.end_of_word_suffix %q is not supported", *m.EndOfWordSuffix)
	}
	if err := t.readVocab(f); err != nil {
		return err
	}
	t.rules = make(bpeRules, len(m.Merges))
	for rank, raw := range m.Merges {
		a, b, err := hfMerge(raw)
		if err != nil {
			return fmt.Errorf("model.merges[%d]: %w", rank, err)
		}
		ia, okA := t.vocab[a]
		ib, okB := t.vocab[b]
		ij, okJ := t.vocab[a+b]
		if !okA || !okB || !okJ {
			return fmt.Errorf("model.merges[%d]: %q + %q: a token or their concatenation is not in model.vocab", rank, a, b)
		}
		if _, dup := t.rules[pairKey(ia, ib)]; !dup { // Hugging Face keeps the first rank
			t.rules[pairKey(ia, ib)] = bpeMerge{rank: int32(rank), id: ij}
		}
	}
	if m.UnkToken != nil && *m.UnkToken != "" {
		id, ok := t.vocab[*m.UnkToken]
		if !ok {
			return fmt.Errorf("model.unk_token %q is not in model.vocab", *m.UnkToken)
		}
		t.unk = id
	}
	t.fuseUnk, t.ignoreM = m.FuseUnk, m.IgnoreMerges
	for b := range 256 {
		t.byteID[b] = -1
	}
	if m.ByteFallback {
		for b := range 256 {
			id, ok := t.vocab[fmt.Sprintf("<0x%02X>", b)]
			if !ok {
				return fmt.Errorf("model.byte_fallback: no token <0x%02X> in model.vocab", b)
			}
			t.byteID[b] = id
		}
	}
	return nil
}

// readVocab reads model.vocab and sizes the id table from it and the added tokens.
func (t *HFTokenizer) readVocab(f *hfFile) error {
	m := &f.Model
	if len(m.Vocab) == 0 {
		return fmt.Errorf("model.vocab is empty or missing")
	}
	limit := int64(min(hfMaxVocab, len(m.Vocab)+len(f.AddedTokens)))
	size := int64(0)
	t.vocab = make(map[string]int32, len(m.Vocab))
	for tok, id := range m.Vocab {
		if id < 0 || id >= limit {
			return fmt.Errorf("model.vocab: token %q has id %d outside [0, %d)", tok, id, limit)
		}
		t.vocab[tok] = int32(id)
		size = max(size, id+1)
	}
	for i, a := range f.AddedTokens {
		if a.ID < 0 || a.ID >= limit {
			return fmt.Errorf("added_tokens[%d]: %q has id %d outside [0, %d)", i, a.Content, a.ID, limit)
		}
		size = max(size, a.ID+1)
	}
	t.pieces = make([]string, size)
	return nil
}

// buildAdded indexes added_tokens by first byte, longest first.
func (t *HFTokenizer) buildAdded(f *hfFile) error {
	t.added = f.AddedTokens
	for i, a := range t.added {
		switch {
		case a.Content == "":
			return fmt.Errorf("added_tokens[%d] (id %d): empty content", i, a.ID)
		case a.SingleWord:
			return fmt.Errorf("added_tokens[%d] %q: single_word is not supported", i, a.Content)
		}
		t.addedFirst[a.Content[0]] = append(t.addedFirst[a.Content[0]], i)
	}
	for _, c := range t.addedFirst {
		slices.SortStableFunc(c, func(x, y int) int { return cmp.Compare(len(t.added[y].Content), len(t.added[x].Content)) })
	}
	return nil
}

// buildNormalizer reads normalizer.
func (t *HFTokenizer) buildNormalizer(f *hfFile) error {
	return t.addNormalizer("normalizer", f.Normalizer)
}

func (t *HFTokenizer) addNormalizer(field string, raw json.RawMessage) error {
	var c hfComponent
	if ok, err := parseComponent(field, raw, &c); !ok {
		return err
	}
	var fn func(string) string
	switch c.Type {
	case "Sequence":
		for i, sub := range c.Normalizers {
			if err := t.addNormalizer(fmt.Sprintf("%s.normalizers[%d]", field, i), sub); err != nil {
				return err
			}
		}
		return nil
	case "NFC":
		fn = norm.NFC.String
	case "NFD":
		fn = norm.NFD.String
	case "NFKC":
		fn = norm.NFKC.String
	case "NFKD":
		fn = norm.NFKD.String
	case "Lowercase":
		fn = strings.ToLower
	case "BertNormalizer":
		fn = bertNormalizer(&c)
	case "Prepend":
		p := c.Prepend
		fn = func(s string) string { return p + s }
	case "Replace":
		if c.Pattern == nil || c.Pattern.String == nil {
			return fmt.Errorf("%s: Replace with a regex pattern is not supported", field)
		}
		old, repl := *c.Pattern.String, c.Content
		fn = func(s string) string { return strings.ReplaceAll(s, old, repl) }
	default:
		return fmt.Errorf("%s.type %q is not supported", field, c.Type)
	}
	t.normalize = append(t.normalize, fn)
	return nil
}

// buildPreTokenizer reads pre_tokenizer.
func (t *HFTokenizer) buildPreTokenizer(f *hfFile) error {
	return t.addPreTokenizer("pre_tokenizer", f.PreTokenizer)
}

func (t *HFTokenizer) addPreTokenizer(field string, raw json.RawMessage) error {
	var c hfComponent
	if ok, err := parseComponent(field, raw, &c); !ok {
		return err
	}
	switch c.Type {
	case "Sequence":
		for i, sub := range c.Pretokenizers {
			if err := t.addPreTokenizer(fmt.Sprintf("%s.pretokenizers[%d]", field, i), sub); err != nil {
				return err
			}
		}
	case "Split":
		if c.Pattern == nil || c.Pattern.Regex == nil {
			return fmt.Errorf("%s: Split with a string pattern is not supported", field)
		}
		if c.Behavior != "Isolated" || c.Invert {
			return fmt.Errorf("%s: Split behavior %q invert %v is not supported (only Isolated, not inverted)", field, c.Behavior, c.Invert)
		}
		scan, err := hfSplitScanner(*c.Pattern.Regex)
		if err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		t.pretok = append(t.pretok, func(dst, ws []string, _ bool) []string { return splitWords(dst, ws, scan) })
	case "ByteLevel":
		t.byteLvl = true
		prefix, regex := c.AddPrefixSpace, c.UseRegex == nil || *c.UseRegex
		t.pretok = append(t.pretok, func(dst, ws []string, _ bool) []string {
			if prefix {
				for i, w := range ws {
					if !strings.HasPrefix(w, " ") {
						ws[i] = " " + w
					}
				}
			}
			if regex {
				return splitWords(dst, ws, gpt2WordEnd)
			}
			return append(dst, ws...)
		})
	case "Metaspace":
		return t.addMetaspace(field, &c)
	case "BertPreTokenizer":
		t.pretok = append(t.pretok, bertPreTokenize)
	case "Digits":
		single := c.IndividualDigits
		t.pretok = append(t.pretok, func(dst, ws []string, _ bool) []string {
			return splitWords(dst, ws, func(s string, i int) int { return digitsEnd(s, i, single) })
		})
	default:
		return fmt.Errorf("%s.type %q is not supported", field, c.Type)
	}
	return nil
}

// addMetaspace adds a Metaspace pre-tokenizer: spaces become the replacement character,
// which is prepended (prepend_scheme "always", or "first" on the text's first segment)
// and, with split, starts each word.
func (t *HFTokenizer) addMetaspace(field string, c *hfComponent) error {
	rep := cmp.Or(c.Replacement, "▁")
	scheme := cmp.Or(c.PrependScheme, "always")
	if scheme != "always" && scheme != "first" && scheme != "never" {
		return fmt.Errorf("%s: Metaspace prepend_scheme %q is not supported", field, scheme)
	}
	split := c.Split == nil || *c.Split
	t.pretok = append(t.pretok, func(out, ws []string, first bool) []string {
		for i, w := range ws {
			w = strings.ReplaceAll(w, " ", rep)
			if (scheme == "always" || scheme == "first" && first && i == 0) && !strings.HasPrefix(w, rep) {
				w = rep + w
			}
			if !split {
				out = append(out, w)
				continue
			}
			for w != "" { // words start where a run of replacement characters starts
				j := metaspaceCut(w, rep)
				out, w = append(out, w[:j]), w[j:]
			}
		}
		return out
	})
	return nil
}

// metaspaceCut returns the end of the first word of w: the first position after 0 where
// a run of rep starts (Hugging Face's MergedWithNext split), or len(w).
func metaspaceCut(w, rep string) int {
	for j := 1; j < len(w); {
		k := strings.Index(w[j:], rep)
		if k < 0 {
			break
		}
		j += k
		if !strings.HasSuffix(w[:j], rep) {
			return j
		}
		j += len(rep)
	}
	return len(w)
}

// splitWords appends to out each word of ws cut with scan (the end of the word starting
// at i).
func splitWords(out, ws []string, scan func(string, int) int) []string {
	for _, w := range ws {
		for i := 0; i < len(w); {
			j := scan(w, i)
			out = append(out, w[i:j])
			i = j
		}
	}
	return out
}

// digitsEnd is the Digits pre-tokenizer: runs of numbers (single numbers if single) are
// words, and so are the runs between them.
func digitsEnd(s string, i int, single bool) int {
	r, n := utf8.DecodeRuneInString(s[i:])
	isNum := unicode.IsNumber(r)
	if isNum && single {
		return i + n
	}
	j := i + n
	for j < len(s) {
		r2, n2 := utf8.DecodeRuneInString(s[j:])
		if unicode.IsNumber(r2) != isNum {
			break
		}
		j += n2
	}
	return j
}

// buildPostProcessor reads post_processor: the special ids around each encoding.
func (t *HFTokenizer) buildPostProcessor(f *hfFile) error {
	return t.addPostProcessor("post_processor", f.PostProcessor)
}

func (t *HFTokenizer) addPostProcessor(field string, raw json.RawMessage) error {
	var c hfComponent
	if ok, err := parseComponent(field, raw, &c); !ok {
		return err
	}
	switch c.Type {
	case "ByteLevel":
	case "Sequence":
		for i, sub := range c.Processors {
			if err := t.addPostProcessor(fmt.Sprintf("%s.processors[%d]", field, i), sub); err != nil {
				return err
			}
		}
	case "BertProcessing", "RobertaProcessing":
		cls, err := t.processorToken(field+".cls", c.Cls)
		if err != nil {
			return err
		}
		sep, err := t.processorToken(field+".sep", c.Sep)
		if err != nil {
			return err
		}
		t.prefix, t.suffix = append(t.prefix, cls), append(t.suffix, sep)
	case "TemplateProcessing":
		seen := false
		for i, p := range c.Single {
			switch {
			case p.Sequence != nil && p.Sequence.ID == "A" && !seen:
				seen = true
			case p.SpecialToken != nil:
				sp, ok := c.SpecialTokens[p.SpecialToken.ID]
				if !ok {
					return fmt.Errorf("%s.single[%d]: special token %q is not in special_tokens", field, i, p.SpecialToken.ID)
				}
				for _, id := range sp.IDs {
					if id < 0 || id >= int64(len(t.pieces)) {
						return fmt.Errorf("%s.special_tokens[%q]: id %d outside [0, %d)", field, p.SpecialToken.ID, id, len(t.pieces))
					}
					if seen {
						t.suffix = append(t.suffix, int32(id))
					} else {
						t.prefix = append(t.prefix, int32(id))
					}
				}
			default:
				return fmt.Errorf("%s.single[%d]: only SpecialToken items and one Sequence \"A\" are supported", field, i)
			}
		}
	default:
		return fmt.Errorf("%s.type %q is not supported", field, c.Type)
	}
	return nil
}

// processorToken reads a BertProcessing or RobertaProcessing token: [content, id].
func (t *HFTokenizer) processorToken(field string, raw []json.RawMessage) (int32, error) {
	var id int64
	if len(raw) != 2 || json.Unmarshal(raw[1], &id) != nil {
		return -1, fmt.Errorf("%s: want [token, id]", field)
	}
	if id < 0 || id >= int64(len(t.pieces)) {
		return -1, fmt.Errorf("%s: id %d outside [0, %d)", field, id, len(t.pieces))
	}
	return int32(id), nil
}

// buildDecoder reads decoder and sets each id's text.
func (t *HFTokenizer) buildDecoder(f *hfFile) error {
	var steps []func(string) string
	if err := t.addDecoder("decoder", f.Decoder, &steps, new(bool)); err != nil {
		return err
	}
	for tok, id := range t.vocab {
		for _, s := range steps {
			tok = s(tok)
		}
		t.pieces[id] = tok
	}
	for _, a := range t.added {
		t.pieces[a.ID] = a.Content
		if t.decodeAdded != nil {
			t.pieces[a.ID] = t.decodeAdded(a.Content)
		}
	}
	return nil
}

// addDecoder appends the per-token steps of a decoder; fused reports whether a Fuse came
// before (a Strip after it strips the whole text, not each token).
func (t *HFTokenizer) addDecoder(field string, raw json.RawMessage, steps *[]func(string) string, fused *bool) error {
	var c hfComponent
	if ok, err := parseComponent(field, raw, &c); !ok {
		return err
	}
	switch c.Type {
	case "Sequence":
		for i, sub := range c.Decoders {
			if err := t.addDecoder(fmt.Sprintf("%s.decoders[%d]", field, i), sub, steps, fused); err != nil {
				return err
			}
		}
	case "ByteLevel":
		*steps = append(*steps, gpt2DecodeChars)
	case "Replace":
		if c.Pattern == nil || c.Pattern.String == nil {
			return fmt.Errorf("%s: Replace with a regex pattern is not supported", field)
		}
		old, repl := *c.Pattern.String, c.Content
		*steps = append(*steps, func(s string) string { return strings.ReplaceAll(s, old, repl) })
	case "ByteFallback":
		*steps = append(*steps, byteFallbackPiece)
	case "WordPiece":
		t.addWordPieceDecoder(&c, steps)
	case "Fuse":
		*fused = true
	case "Strip":
		if c.Content != " " || c.Stop != 0 || !*fused {
			return fmt.Errorf("%s: Strip is supported only after Fuse, with content \" \" and stop 0", field)
		}
		t.stripLead = c.Start
	case "Metaspace":
		rep := cmp.Or(c.Replacement, "▁")
		*steps = append(*steps, func(s string) string { return strings.ReplaceAll(s, rep, " ") })
		if cmp.Or(c.PrependScheme, "always") != "never" {
			t.stripLead = 1
		}
	default:
		return fmt.Errorf("%s.type %q is not supported", field, c.Type)
	}
	return nil
}

// byteFallbackPiece turns a byte-fallback token "<0xXX>" into its byte.
func byteFallbackPiece(s string) string {
	if len(s) == 6 && strings.HasPrefix(s, "<0x") && s[5] == '>' {
		if b, err := strconv.ParseUint(s[3:5], 16, 8); err == nil {
			return string([]byte{byte(b)})
		}
	}
	return s
}

// finish sets the byte symbols of a byte-level model, and the metaspace cut of a model
// without a pre-tokenizer (see metaspaceCutExact).
func (t *HFTokenizer) finish(*hfFile) error {
	if !t.byteLvl {
		if len(t.pretok) == 0 && !t.ignoreM && t.metaspaceCutExact() {
			t.pretok = append(t.pretok, func(out, ws []string, _ bool) []string {
				return splitWords(out, ws, func(s string, i int) int { return i + metaspaceCut(s[i:], "▁") })
			})
		}
		return nil
	}
	for b := range 256 {
		id, ok := t.vocab[string(gpt2ByteChars[b])]
		if !ok {
			return fmt.Errorf("model.vocab: byte-level BPE has no token for the byte 0x%02x (%q)", b, string(gpt2ByteChars[b]))
		}
		t.byteID[b] = id
	}
	return nil
}

// metaspaceCutExact reports whether cutting a word before each run of "▁" that follows
// another character changes no BPE result, which holds when no token has "▁" after another
// character: a merge across such a cut would make one. It lets a model without a
// pre-tokenizer (Llama 2's SentencePiece-style BPE) merge and cache word by word instead
// of over whole documents.
func (t *HFTokenizer) metaspaceCutExact() bool {
	for tok := range t.vocab {
		if spansMetaspaceCut(tok, "▁") {
			return false
		}
	}
	return true
}

// spansMetaspaceCut reports whether tok holds rep after something that is not rep: a
// token that would span a cut of metaspaceCut.
func spansMetaspaceCut(tok, rep string) bool {
	for i := 1; i < len(tok); i++ {
		if strings.HasPrefix(tok[i:], rep) && !strings.HasSuffix(tok[:i], rep) {
			return true
		}
	}
	return false
}
