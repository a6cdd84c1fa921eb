package data

import (
	"encoding/json"
	"fmt"
	"strings"
)

// This file reads the parts of a Hugging Face tokenizer.json that HFTokenizer runs.

// hfFile is a tokenizer.json: the fields megago reads. Components stay raw until their
// "type" is known.
type hfFile struct {
	AddedTokens   []hfAddedToken  `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         hfModel         `json:"model"`
}

// hfAddedToken is one entry of added_tokens.
type hfAddedToken struct {
	ID         int64  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// hfModel is the "model" object (BPE only).
type hfModel struct {
	Type                    string            `json:"type"`
	Vocab                   map[string]int64  `json:"vocab"`
	Merges                  []json.RawMessage `json:"merges"`
	UnkToken                *string           `json:"unk_token"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	FuseUnk                 bool              `json:"fuse_unk"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
	Dropout                 *float64          `json:"dropout"`
	MaxInputCharsPerWord    *int              `json:"max_input_chars_per_word"` // WordPiece
}

// hfComponent is any normalizer, pre-tokenizer, post-processor or decoder: its type and
// every field a supported type uses.
type hfComponent struct {
	Type string `json:"type"`
	// Sequence members, under the key each component kind uses.
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	Decoders      []json.RawMessage `json:"decoders"`

	Pattern          *hfPattern `json:"pattern"` // Replace, Split
	Content          string     `json:"content"` // Replace, Strip
	Prepend          string     `json:"prepend"` // Prepend
	Behavior         string     `json:"behavior"`
	Invert           bool       `json:"invert"`
	AddPrefixSpace   bool       `json:"add_prefix_space"` // ByteLevel
	UseRegex         *bool      `json:"use_regex"`        // ByteLevel (default true)
	Replacement      string     `json:"replacement"`      // Metaspace
	PrependScheme    string     `json:"prepend_scheme"`   // Metaspace
	Split            *bool      `json:"split"`            // Metaspace
	Start            int        `json:"start"`            // Strip
	Stop             int        `json:"stop"`
	IndividualDigits bool       `json:"individual_digits"` // Digits

	CleanText          *bool  `json:"clean_text"` // BertNormalizer
	HandleChineseChars *bool  `json:"handle_chinese_chars"`
	StripAccents       *bool  `json:"strip_accents"`
	Lowercase          *bool  `json:"lowercase"`
	Prefix             string `json:"prefix"` // WordPiece decoder
	Cleanup            *bool  `json:"cleanup"`

	Sep []json.RawMessage `json:"sep"` // BertProcessing, RobertaProcessing: [token, id]
	Cls []json.RawMessage `json:"cls"`

	Single        []hfTemplatePiece            `json:"single"` // TemplateProcessing
	SpecialTokens map[string]hfTemplateSpecial `json:"special_tokens"`
}

// hfPattern is a Replace or Split pattern: a literal string or a regex.
type hfPattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

// hfTemplatePiece is one item of TemplateProcessing's "single".
type hfTemplatePiece struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

// hfTemplateSpecial is one entry of TemplateProcessing's special_tokens.
type hfTemplateSpecial struct {
	IDs []int64 `json:"ids"`
}

// parseComponent decodes raw into c; it reports whether raw was present (not null).
func parseComponent(field string, raw json.RawMessage, c *hfComponent) (bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return false, nil
	}
	if err := json.Unmarshal(raw, c); err != nil {
		return false, fmt.Errorf("%s: %w", field, err)
	}
	return true, nil
}

// hfMerge reads one merge: "left right" (older files) or ["left", "right"].
func hfMerge(raw json.RawMessage) (string, string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		a, b, ok := strings.Cut(s, " ")
		if !ok || strings.Contains(b, " ") {
			return "", "", fmt.Errorf("%q is not two tokens separated by one space", s)
		}
		return a, b, nil
	}
	var p []string
	if err := json.Unmarshal(raw, &p); err != nil || len(p) != 2 {
		return "", "", fmt.Errorf("%s is neither \"left right\" nor [\"left\", \"right\"]", truncate(string(raw), 80))
	}
	return p[0], p[1], nil
}

// truncate returns s cut to at most n bytes, marked with "..." when cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// hfTokenizerConfig is the part of tokenizer_config.json megago reads: the special
// tokens, each a string or an object with "content".
type hfTokenizerConfig struct {
	BOS  json.RawMessage `json:"bos_token"`
	EOS  json.RawMessage `json:"eos_token"`
	Pad  json.RawMessage `json:"pad_token"`
	CLS  json.RawMessage `json:"cls_token"`
	SEP  json.RawMessage `json:"sep_token"`
	Mask json.RawMessage `json:"mask_token"`
	Unk  json.RawMessage `json:"unk_token"`
}

// hfTokenName returns the content of a tokenizer_config.json token entry ("" for null).
func hfTokenName(field string, raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var o struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", fmt.Errorf("tokenizer_config.json: %s: neither a string nor an object with \"content\"", field)
	}
	return o.Content, nil
}
