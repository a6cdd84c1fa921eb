//go:build unix

package data

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A preprocess run removes the temporary files a killed run with the same outputs left,
// and writes its datasets 0644 under the umask.
func TestPreprocessCleansLeftoversAndWrites0644(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(input, []byte("{\"text\": \"1 2\"}\n{\"text\": \"3\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := "out_text_document"
	var leftovers []string
	for _, ext := range spillExts { // what a run killed by SIGKILL leaves behind
		p := filepath.Join(dir, base+ext+".0badc0de.tmp")
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
		leftovers = append(leftovers, p)
	}
	other := filepath.Join(dir, "other_text_document.bin.0badc0de.tmp") // another prefix's
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := PreprocessConfig{Input: input, OutputPrefix: filepath.Join(dir, "out")}
	if _, err := Preprocess(context.Background(), cfg, newTestNullTokenizer(t, 10)); err != nil {
		t.Fatal(err)
	}
	for _, p := range leftovers {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("leftover %s is still there (%v)", p, err)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another prefix's temporary file was removed: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") && e.Name() != filepath.Base(other) {
			t.Errorf("%s left behind", e.Name())
		}
	}
	for _, ext := range []string{".bin", ".idx"} {
		st, err := os.Stat(filepath.Join(dir, base+ext))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o644 {
			t.Errorf("%s%s has permission %v, want 0644 (0644 under the umask 022)", base, ext, st.Mode().Perm())
		}
	}
}

// An input whose every line is bad is an error with the count and the first bad line,
// and writes nothing.
func TestPreprocessAllLinesBad(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(input, []byte("{\"title\": \"1\"}\nnot json\n{\"text\": 3}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := PreprocessConfig{Input: input, OutputPrefix: filepath.Join(dir, "out")}
	_, err := Preprocess(context.Background(), cfg, newTestNullTokenizer(t, 10))
	want := "data: preprocess: all 3 lines of " + input + " are bad, nothing written; the first: data: " + input + `:1: missing key "text"`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("files left: %v", entries)
	}
}
