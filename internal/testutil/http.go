package testutil

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// Request sends an HTTP request with a JSON body to url and returns the status and the
// response body; it fails the test if the request cannot be made or read.
func Request(t testing.TB, method, url, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}
