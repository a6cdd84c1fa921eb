package data

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The golden files in testdata/indexed are written by testdata/indexed/gen_golden.py, an
// independent writer of Megatron's format; manifest.json lists what each holds.
const indexedTestdata = "testdata/indexed"

type goldenDataset struct {
	Name  string      `json:"name"`
	DType DType       `json:"dtype"`
	Docs  [][][]int64 `json:"docs"` // documents → sequences → ids
	Modes []int8      `json:"modes"`
}

type goldenManifest struct {
	Datasets []goldenDataset `json:"datasets"`
	Merged   struct {
		Name  string   `json:"name"`
		Parts []string `json:"parts"`
	} `json:"merged"`
}

func readIndexedJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func loadGolden(t *testing.T) goldenManifest {
	t.Helper()
	var m goldenManifest
	readIndexedJSON(t, filepath.Join(indexedTestdata, "manifest.json"), &m)
	if len(m.Datasets) == 0 {
		t.Fatal("manifest lists no datasets")
	}
	return m
}

// sequences flattens the documents into sequences and Megatron's document index.
func (g goldenDataset) sequences() (seqs [][]int32, docIdx []int) {
	docIdx = []int{0}
	for _, doc := range g.Docs {
		for _, seq := range doc {
			s := make([]int32, len(seq))
			for i, v := range seq {
				s[i] = int32(v)
			}
			seqs = append(seqs, s)
		}
		docIdx = append(docIdx, len(seqs))
	}
	return seqs, docIdx
}

var allReadModes = []ReadMode{ReadMmap, ReadCached, ReadLazy}

func TestIndexedReadsGolden(t *testing.T) {
	for _, g := range loadGolden(t).Datasets {
		for _, mode := range allReadModes {
			t.Run(g.Name+"/"+mode.String(), func(t *testing.T) {
				prefix := filepath.Join(indexedTestdata, g.Name)
				ds, err := OpenIndexed(prefix, mode)
				if err != nil {
					t.Fatal(err)
				}
				defer ds.Close()
				checkDataset(t, ds, g)
			})
		}
	}
}

// checkDataset compares every field ds exposes with the golden description g.
func checkDataset(t *testing.T, ds *IndexedDataset, g goldenDataset) {
	t.Helper()
	seqs, docIdx := g.sequences()
	if ds.DType() != g.DType {
		t.Errorf("DType = %v, want %v", ds.DType(), g.DType)
	}
	if ds.NumSequences() != len(seqs) || ds.NumDocuments() != len(g.Docs) {
		t.Fatalf("%d sequences, %d documents; want %d, %d", ds.NumSequences(), ds.NumDocuments(), len(seqs), len(g.Docs))
	}
	for j := range g.Docs {
		if s, e := ds.Document(j); s != docIdx[j] || e != docIdx[j+1] {
			t.Errorf("Document(%d) = [%d, %d), want [%d, %d)", j, s, e, docIdx[j], docIdx[j+1])
		}
	}
	bin, err := os.ReadFile(ds.Prefix() + ".bin")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for i, want := range seqs {
		if n := ds.SequenceLen(i); n != len(want) {
			t.Errorf("SequenceLen(%d) = %d, want %d", i, n, len(want))
			continue
		}
		if got := ds.AppendTokens(nil, i, 0, len(want)); !slices.Equal(got, want) && len(want) > 0 {
			t.Errorf("sequence %d = %v, want %v", i, got, want)
		}
		if len(want) > 1 { // a window inside the sequence, appended after existing tokens
			got := ds.AppendTokens([]int32{-7}, i, 1, len(want)-1)
			if !slices.Equal(got, append([]int32{-7}, want[1:]...)) {
				t.Errorf("sequence %d tokens [1, %d) = %v, want %v", i, len(want), got[1:], want[1:])
			}
		}
		item := int64(g.DType.Size())
		if p := ds.SequencePointer(i); p != total*item {
			t.Errorf("SequencePointer(%d) = %d, want %d", i, p, total*item)
		}
		if ds.Mode() != ReadLazy {
			p := ds.SequencePointer(i)
			if raw := ds.RawSequence(i); !bytes.Equal(raw, bin[p:p+int64(len(want))*item]) {
				t.Errorf("RawSequence(%d) = % x, want the .bin bytes", i, raw)
			}
		}
		total += int64(len(want))
	}
	if ds.NumTokens() != total {
		t.Errorf("NumTokens = %d, want %d", ds.NumTokens(), total)
	}
	if ds.Mode() != ReadLazy {
		var all []byte
		for j := range g.Docs {
			all = append(all, ds.RawDocument(j)...)
		}
		if !bytes.Equal(all, bin) {
			t.Errorf("RawDocument over all documents = % x, want the .bin file % x", all, bin)
		}
	}
	if ds.HasModes() != (g.Modes != nil) {
		t.Fatalf("HasModes = %v, want %v", ds.HasModes(), g.Modes != nil)
	}
	for i, m := range g.Modes {
		if got := ds.SequenceMode(i); got != m {
			t.Errorf("SequenceMode(%d) = %d, want %d", i, got, m)
		}
	}
}

// sameIndexedFiles fails the test unless the dataset at got has the bytes of the one at want.
func sameIndexedFiles(t *testing.T, got, want string) {
	t.Helper()
	for _, ext := range []string{".bin", ".idx"} {
		g, err := os.ReadFile(got + ext)
		if err != nil {
			t.Fatal(err)
		}
		w, err := os.ReadFile(want + ext)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(g, w) {
			t.Errorf("%s%s differs from %s%s:\n got % x\nwant % x", got, ext, want, ext, g, w)
		}
	}
}

func TestIndexedBuilderMatchesGolden(t *testing.T) {
	m := loadGolden(t)
	for _, g := range m.Datasets {
		if g.Modes != nil {
			continue // the builder does not write sequence modes
		}
		t.Run(g.Name+"/AddSequence", func(t *testing.T) {
			prefix := filepath.Join(t.TempDir(), g.Name)
			b, err := NewIndexedBuilder(prefix, g.DType)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			seqs, docIdx := g.sequences()
			for j := range g.Docs {
				for _, s := range seqs[docIdx[j]:docIdx[j+1]] {
					if err := b.AddSequence(s); err != nil {
						t.Fatal(err)
					}
				}
				if err := b.EndDocument(); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Finalize(); err != nil {
				t.Fatal(err)
			}
			sameIndexedFiles(t, prefix, filepath.Join(indexedTestdata, g.Name))
		})
		t.Run(g.Name+"/AddDocument", func(t *testing.T) {
			prefix := filepath.Join(t.TempDir(), g.Name)
			b, err := NewIndexedBuilder(prefix, g.DType)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			seqs, docIdx := g.sequences()
			for j := range g.Docs {
				var ids []int32
				var lengths []int
				for _, s := range seqs[docIdx[j]:docIdx[j+1]] {
					ids = append(ids, s...)
					lengths = append(lengths, len(s))
				}
				if err := b.AddDocument(ids, lengths); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Finalize(); err != nil {
				t.Fatal(err)
			}
			sameIndexedFiles(t, prefix, filepath.Join(indexedTestdata, g.Name))
		})
	}
	t.Run("merge", func(t *testing.T) {
		prefix := filepath.Join(t.TempDir(), "merged")
		b, err := NewIndexedBuilder(prefix, Uint16)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		for _, part := range m.Merged.Parts {
			if err := b.AddIndexed(filepath.Join(indexedTestdata, part)); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Finalize(); err != nil {
			t.Fatal(err)
		}
		sameIndexedFiles(t, prefix, filepath.Join(indexedTestdata, m.Merged.Name))
	})
}

type corruptCase struct {
	Name   string `json:"name"`
	File   string `json:"file"` // "idx" or "bin": the file the error must name
	Field  string `json:"field"`
	Offset int64  `json:"offset"`
}

// TestIndexedCorrupt opens each broken file of testdata/indexed/corrupt and checks that the
// error names the file, the field and the byte offset the generating script recorded.
func TestIndexedCorrupt(t *testing.T) {
	dir := filepath.Join(indexedTestdata, "corrupt")
	var cases []corruptCase
	readIndexedJSON(t, filepath.Join(dir, "manifest.json"), &cases)
	if len(cases) < 15 {
		t.Fatalf("manifest lists %d corrupt files, want one per error kind", len(cases))
	}
	for _, c := range cases {
		for _, mode := range allReadModes {
			t.Run(c.Name+"/"+mode.String(), func(t *testing.T) {
				prefix := filepath.Join(dir, c.Name)
				ds, err := OpenIndexed(prefix, mode)
				if err == nil {
					ds.Close()
					t.Fatal("opened a corrupt dataset without error")
				}
				var ie *IndexError
				if !errors.As(err, &ie) {
					t.Fatalf("error %q is not an *IndexError", err)
				}
				wantFile := prefix + "." + c.File
				if ie.File != wantFile || ie.Field != c.Field || ie.Offset != c.Offset {
					t.Errorf("error in %s, field %q, offset %d; want %s, %q, %d\n%v", ie.File, ie.Field, ie.Offset, wantFile, c.Field, c.Offset, err)
				}
				for _, s := range []string{wantFile, c.Field, fmt.Sprintf("byte offset %d", c.Offset)} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not mention %q", err, s)
					}
				}
			})
		}
	}
}

func TestIndexedBuilderErrors(t *testing.T) {
	dir := t.TempDir()
	b, err := NewIndexedBuilder(filepath.Join(dir, "x"), Uint16)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AddSequence([]int32{1, 65536}); err == nil || !strings.Contains(err.Error(), "65536") {
		t.Errorf("AddSequence of 65536 into uint16: err = %v, want one naming the id", err)
	}
	if err := b.AddIndexed(filepath.Join(indexedTestdata, "int32")); err == nil || !strings.Contains(err.Error(), "int32") {
		t.Errorf("AddIndexed of an int32 dataset into uint16: err = %v, want a dtype mismatch", err)
	}
	if err := b.AddIndexed(filepath.Join(indexedTestdata, "corrupt", "bad_magic")); err == nil || !strings.Contains(err.Error(), "magic") {
		t.Errorf("AddIndexed of a corrupt dataset: err = %v, want the validation error", err)
	}
	if _, err := NewIndexedBuilder(filepath.Join(dir, "y"), DType(9)); err == nil {
		t.Error("NewIndexedBuilder accepted dtype code 9")
	}
	if _, err := NewIndexedBuilder(filepath.Join(dir, "no such dir", "z"), Uint16); err == nil {
		t.Error("NewIndexedBuilder in a missing directory succeeded")
	}
}

// TestIndexedBuilderTemporaryNames checks that nothing appears under the final names before
// Finalize, and that Close of an abandoned builder leaves the directory empty.
func TestIndexedBuilderTemporaryNames(t *testing.T) {
	dir := t.TempDir()
	prefix := filepath.Join(dir, "ds")
	b, err := NewIndexedBuilder(prefix, Int32)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AddDocument([]int32{1, 2, 3}, []int{2, 1}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{prefix + ".bin", prefix + ".idx"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists before Finalize", p)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("Close left %d files behind: %v", len(ents), ents)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestIndexedPanics(t *testing.T) {
	ds, err := OpenIndexed(filepath.Join(indexedTestdata, "uint16_docs"), ReadLazy)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	tests := []struct {
		name string
		f    func()
		want string
	}{
		{"sequence out of range", func() { ds.SequenceLen(ds.NumSequences()) }, "out of range"},
		{"negative sequence", func() { ds.AppendTokens(nil, -1, 0, 0) }, "out of range"},
		{"tokens past the end", func() { ds.AppendTokens(nil, 0, 2, 2) }, "outside sequence 0"},
		{"document out of range", func() { ds.Document(ds.NumDocuments()) }, "out of range"},
		{"raw bytes in lazy mode", func() { ds.RawSequence(0) }, "lazy"},
		{"no modes", func() { ds.SequenceMode(0) }, "no sequence modes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(fmt.Sprint(r), tt.want) {
					t.Errorf("panic %v, want one mentioning %q", r, tt.want)
				}
			}()
			tt.f()
		})
	}
}

func TestDTypeForVocab(t *testing.T) {
	tests := []struct {
		vocab int
		want  DType
	}{{1000, Uint16}, {50257, Uint16}, {65499, Uint16}, {65500, Int32}, {250000, Int32}}
	for _, tt := range tests {
		if got := DTypeForVocab(tt.vocab); got != tt.want {
			t.Errorf("DTypeForVocab(%d) = %v, want %v", tt.vocab, got, tt.want)
		}
	}
	for d := Uint8; d.Valid(); d++ {
		if p, err := ParseDType(d.String()); err != nil || p != d {
			t.Errorf("ParseDType(%q) = %v, %v", d.String(), p, err)
		}
	}
}
