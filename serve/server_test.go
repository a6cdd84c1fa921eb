package serve

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"megago/data"
	"megago/internal/testutil"
)

// testVocab is the NullTokenizer's vocabulary of most tests: text is ids separated by
// spaces, EOD is testVocab-1.
const testVocab = 100

// startServer starts a test server on gen with tok and returns its URL.
func startServer(t *testing.T, gen Generator, tok data.Tokenizer, cfg ServerConfig) (*Server, string) {
	t.Helper()
	s, err := NewServer(gen, tok, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts.URL
}

// nullServer starts a server on a fake engine with the NullTokenizer.
func nullServer(t *testing.T, maxLen, maxRunning int) (*fakeEngine, string) {
	t.Helper()
	tok, err := data.NewNullTokenizer(testVocab)
	if err != nil {
		t.Fatal(err)
	}
	f := newFake(testVocab, maxLen, maxRunning)
	_, url := startServer(t, f, tok, ServerConfig{ModelName: "tiny"})
	return f, url
}

// call sends a request and returns the status and body.
func call(t *testing.T, method, url, body string) (int, []byte) {
	return testutil.Request(t, method, url, body)
}

// decode unmarshals b into v, failing the test if it is not JSON.
func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("response %q: %v", b, err)
	}
}

// events reads a server-sent event stream: the JSON of each "data:" line, and whether it
// ended with [DONE].
func events(t *testing.T, r io.Reader) ([]map[string]any, bool) {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(r)
	done := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("stream line %q is not an event", line)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var m map[string]any
		decode(t, []byte(data), &m)
		out = append(out, m)
	}
	return out, done
}

func TestHealthModelsPage(t *testing.T) {
	_, url := nullServer(t, 64, 4)
	tests := []struct {
		name, path, want string
	}{
		{"health", "/health", `{"status":"ok"}`},
		{"models", "/v1/models", `"id":"tiny","object":"model"`},
		{"page", "/", "<title>megago serve</title>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, b := call(t, "GET", url+tt.path, "")
			if code != http.StatusOK || !strings.Contains(string(b), tt.want) {
				t.Errorf("GET %s = %d %s, want 200 with %s", tt.path, code, b, tt.want)
			}
		})
	}
}

func TestTokenizerLargerThanModel(t *testing.T) {
	tok, _ := data.NewNullTokenizer(testVocab)
	if _, err := NewServer(newFake(testVocab-1, 64, 1), tok, ServerConfig{}); err == nil {
		t.Error("NewServer accepted a tokenizer with more ids than the model")
	}
}
