package data

import (
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// LoadTikTokenizer reads a TikTokenizer vocabulary as Megatron's --tokenizer-model names
// it: a JSON list whose entry i is {"rank": i, "token_bytes": BASE64, "token_str": ...}
// (token_str, the text for people, is not read), the entries 0..255 being the single
// bytes 0..255, no bytes twice. A name ending in ".gz" is read through gzip. Only the first
// VocabSize − NumSpecialTokens entries are used and checked (Megatron's --vocab-size
// truncation); the file must have that many. Errors name the file and the entry.
func LoadTikTokenizer(path string, c TikTokenConfig) (*TikTokenizer, error) {
	if path == "" {
		return nil, errors.New("data: TikTokenizer needs --tokenizer-model FILE (a JSON list of {rank, token_bytes, token_str})")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("data: TikTokenizer: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("data: TikTokenizer %s: %w", path, err)
		}
		r = zr
	}
	t, err := ReadTikTokenizer(r, c)
	if err != nil {
		return nil, fmt.Errorf("data: TikTokenizer %s: %w", path, err)
	}
	return t, nil
}

// ReadTikTokenizer is LoadTikTokenizer reading the vocabulary from r.
func ReadTikTokenizer(r io.Reader, c TikTokenConfig) (*TikTokenizer, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	inner := c.VocabSize - c.NumSpecialTokens
	tokens, total, err := readTikTokenRanks(r, inner)
	if err != nil {
		return nil, err
	}
	if len(tokens) < inner {
		return nil, fmt.Errorf("%d entries: --vocab-size %d with %d special tokens needs %d", total, c.VocabSize, c.NumSpecialTokens, inner)
	}
	return newTikTokenizer(tokens, c)
}

// readTikTokenRanks returns the bytes of the first n entries of the JSON list in r, in
// rank order, and the number of entries; it checks the entries it keeps and that the
// whole of r is one JSON list.
func readTikTokenRanks(r io.Reader, n int) (tokens []string, total int, err error) {
	dec := json.NewDecoder(r)
	const want = "a JSON list of {rank, token_bytes, token_str}"
	if tok, err := dec.Token(); err != nil {
		return nil, 0, fmt.Errorf("not %s: %w", want, err)
	} else if tok != json.Delim('[') {
		return nil, 0, fmt.Errorf("not %s: starts with %v", want, tok)
	}
	tokens = make([]string, 0, min(n, 1<<16))
	seen := make(map[string]int, min(n, 1<<16))
	entry := map[string]json.RawMessage{}
	for ; dec.More(); total++ {
		if total >= n {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, total, fmt.Errorf("entry %d: %w", total, err)
			}
			continue
		}
		clear(entry)
		if err := dec.Decode(&entry); err != nil {
			return nil, total, fmt.Errorf("entry %d: %w", total, err)
		}
		tok, err := tiktokenEntry(entry, total)
		if err != nil {
			return nil, total, fmt.Errorf("entry %d: %w", total, err)
		}
		if j, dup := seen[tok]; dup {
			return nil, total, fmt.Errorf("entry %d: token_bytes %q repeat entry %d", total, tok, j)
		}
		seen[tok] = total
		tokens = append(tokens, tok)
	}
	if _, err := dec.Token(); err != nil {
		return nil, total, fmt.Errorf("after entry %d: %w", total, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, total, fmt.Errorf("data after the list (%v)", err)
	}
	return tokens, total, nil
}

// tiktokenEntry returns the token bytes of entry i, checking its fields as Megatron's
// reload_mergeable_ranks does.
func tiktokenEntry(e map[string]json.RawMessage, i int) (string, error) {
	for k := range e {
		if k != "rank" && k != "token_bytes" && k != "token_str" {
			return "", fmt.Errorf("field %q: want only rank, token_bytes and token_str", k)
		}
	}
	for _, k := range []string{"rank", "token_bytes", "token_str"} {
		if _, ok := e[k]; !ok {
			return "", fmt.Errorf("no %q field", k)
		}
	}
	var rank int64
	if err := json.Unmarshal(e["rank"], &rank); err != nil {
		return "", fmt.Errorf("rank %s is not an integer", e["rank"])
	}
	if rank != int64(i) {
		return "", fmt.Errorf("rank %d: ranks must be 0, 1, 2, ... in list order (one is missing, repeated or out of place)", rank)
	}
	var b64 string
	if err := json.Unmarshal(e["token_bytes"], &b64); err != nil {
		return "", fmt.Errorf("token_bytes %s is not a string", e["token_bytes"])
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return "", fmt.Errorf("token_bytes %q is not base64: %w", b64, err)
	}
	if i < 256 && (len(raw) != 1 || raw[0] != byte(i)) {
		return "", fmt.Errorf("token_bytes %q: rank %d must be the single byte 0x%02x", raw, i, i)
	}
	return string(raw), nil
}
