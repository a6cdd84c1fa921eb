package data

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
)

// FuzzParseLine checks the preprocessor's line parser against a plain decode with
// encoding/json into interface values: the parser must accept exactly the objects whose
// keys hold a string or a list of strings, and return the same strings.
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		`{"text": "1 2 3"}`,
		`{"text": ["a", "", "b"], "title": "t"}`,
		`{"text": "caf\u00e9 \"q\" \\ \n"}`,
		`{"text": "invalid utf8 ` + "\xff" + `"}`,
		"{\"text\": \"raw utf8 \xc3\xa9\"}",
		`{"text": 5}`, `{"text": null}`, `{"text": [1]}`, `{"title": "x"}`,
		`{"text": "a", "text": "b"}`, `[]`, `"text"`, ``, `  `, `{`, `{"text": "a"} x`,
		`{"text": {"nested": "x"}}`, `{"text": true}`, "\ufeff{\"text\": \"bom\"}",
	} {
		f.Add([]byte(s))
	}
	keys := []string{"text", "title"}
	f.Fuzz(func(t *testing.T, line []byte) {
		vals, err := parseLine(line, keys[:1])
		want, ok := referenceParse(line, keys[:1])
		if (err == nil) != ok {
			t.Fatalf("parseLine(%q) error %v, reference accepts: %v", line, err, ok)
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if !slices.Equal(vals[0].texts, want[0]) {
			t.Fatalf("parseLine(%q) = %q, reference %q", line, vals[0].texts, want[0])
		}
	})
}

// referenceParse decodes line with encoding/json into interface values and returns each
// key's strings, and whether every key holds a string or a list of strings.
func referenceParse(line []byte, keys []string) ([][]string, bool) {
	var obj map[string]any
	if len(bytes.TrimSpace(line)) == 0 || json.Unmarshal(line, &obj) != nil || obj == nil {
		return nil, false
	}
	out := make([][]string, len(keys))
	for k, key := range keys {
		switch v := obj[key].(type) {
		case string:
			out[k] = []string{v}
		case []any:
			out[k] = []string{}
			for _, e := range v {
				s, ok := e.(string)
				if !ok {
					return nil, false
				}
				out[k] = append(out[k], s)
			}
		default:
			return nil, false
		}
	}
	return out, true
}
