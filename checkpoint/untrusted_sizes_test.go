package checkpoint

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// refusalBudget is what refusing an untrusted file may allocate in all.
const refusalBudget = 64 << 20

// allocated returns the bytes f allocates (live or garbage).
func allocated(f func()) uint64 {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// refuses checks that f returns the error want (the exact text) and allocates at most
// refusalBudget doing so.
func refuses(t *testing.T, what string, want string, f func() error) {
	t.Helper()
	var err error
	n := allocated(func() { err = f() })
	if err == nil || err.Error() != want {
		t.Errorf("%s: got %v\nwant %s", what, err, want)
	}
	if n > refusalBudget {
		t.Errorf("%s: refusing allocated %d MB, more than %d MB", what, n>>20, refusalBudget>>20)
	}
}

// gpt2Elements is the number of elements in testdata/hf/gpt2/model.safetensors, from its
// header, read by Python's json (see the test below).
const gpt2Elements = 16488

// gpt2Need is a lower bound of the parameters of testdata/hf/gpt2's model (n_embd 24, 4
// heads of 6, n_inner 96, n_positions 16) with n_layer layers and vocab entries: the
// word and position tables, and per layer the query and output projections and the two
// MLP matrices.
func gpt2Need(vocab, layers float64) float64 {
	const c, heads, headSize, inner, positions = 24, 4, 6, 96, 16
	return vocab*c + positions*c + layers*(2*c*heads*headSize+2*c*inner)
}

// Sizes in config.json that the tensors in model.safetensors cannot back are refused
// before anything is allocated at those sizes.
func TestImportHFRefusesUntrustedSizes(t *testing.T) {
	src := filepath.Join("testdata", "hf", "gpt2")
	if n, err := safetensorsElements(filepath.Join(src, hfWeightsFile)); err != nil || n != gpt2Elements {
		t.Fatalf("the test file has %d elements (%v), want %d", n, err, gpt2Elements)
	}
	for _, tc := range []struct {
		name, field   string
		value         string
		vocab, layers float64
	}{
		{"vocabulary 10^12", `"vocab_size": 67`, `"vocab_size": 1000000000000`, 1e12, 2},
		{"vocabulary 2·10^6", `"vocab_size": 67`, `"vocab_size": 2000000`, 2e6, 2},
		{"a million layers", `"n_layer": 2`, `"n_layer": 1000000`, 67, 1e6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			copyDir(t, src, dir)
			cfg := filepath.Join(dir, hfConfigFile)
			b := readFile(t, cfg)
			if !bytes.Contains(b, []byte(tc.field)) {
				t.Fatalf("config.json has no %s", tc.field)
			}
			must(t, os.WriteFile(cfg, bytes.Replace(b, []byte(tc.field), []byte(tc.value), 1), 0o644))
			want := fmt.Sprintf("checkpoint: the gpt configuration (vocabulary %d, hidden 24, %d layers, 4 heads of 6, MLP 96) needs at least %.4g parameters, but the tensors of %s have only %d elements: its sizes do not match them (%s)",
				int64(tc.vocab), int64(tc.layers), gpt2Need(tc.vocab, tc.layers), filepath.Join(dir, hfWeightsFile), gpt2Elements, cfg)
			refuses(t, "ImportHF", want, func() error { _, _, err := ImportHF(dir); return err })
		})
	}
}

// An edited manifest is refused by its checksum; a manifest of format version 1, which
// has none, is still read, and a Vocab larger than the stored tensors is refused before
// a model is built.
func TestManifestChecksumAndSizes(t *testing.T) {
	ctx := context.Background()
	m, global, err := ImportHF(filepath.Join("testdata", "hf", "gpt2"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := WriteGlobal(ctx, dir, m, global, 5, 0, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, IterDir(5), ManifestFile)
	orig := readFile(t, path)
	if _, _, err := ReadGlobal(dir, 0); err != nil {
		t.Fatalf("reading the manifest as written: %v", err)
	}

	edited := bytes.Replace(orig, []byte(`"Vocab": 67,`), []byte(`"Vocab": 2000000,`), 1)
	if bytes.Equal(edited, orig) {
		t.Fatalf("the manifest has no \"Vocab\": 67:\n%s", orig)
	}
	must(t, os.WriteFile(path, edited, 0o644))
	i := bytes.Index(edited, []byte(`"manifest_sha256": "`)) + len(`"manifest_sha256": "`)
	recorded := string(edited[i : i+64])
	zeroed := bytes.Clone(edited)
	copy(zeroed[i:], strings.Repeat("0", 64))
	want := fmt.Sprintf("checkpoint: %s: manifest checksum mismatch (its contents have SHA-256 %x, it records %s): it was edited or is corrupt",
		path, sha256.Sum256(zeroed), recorded)
	refuses(t, "ReadGlobal of an edited manifest", want, func() error { _, _, err := ReadGlobal(dir, 0); return err })

	// The same edit in a version-1 manifest (no checksum): read, then refused by size.
	legacy := edited[:0:0]
	for _, line := range bytes.SplitAfter(edited, []byte("\n")) {
		if !bytes.Contains(line, []byte(`"manifest_sha256"`)) {
			legacy = append(legacy, line...)
		}
	}
	legacy = bytes.Replace(legacy, []byte(`"format_version": 2`), []byte(`"format_version": 1`), 1)
	must(t, os.WriteFile(path, legacy, 0o644))
	man, global2, err := ReadGlobal(dir, 0)
	if err != nil {
		t.Fatalf("a version-1 manifest without a checksum: %v", err)
	}
	need := gpt2Need(2e6, 2)
	var present int64
	for _, g := range global2 {
		present += int64(g.Numel())
	}
	want = fmt.Sprintf("checkpoint: the gpt configuration (vocabulary 2000000, hidden 24, 2 layers, 4 heads of 6, MLP 96) needs at least %.4g parameters, but the tensors given have only %d elements: its sizes do not match them", need, present)
	refuses(t, "ExportHF", want, func() error { return ExportHF(t.TempDir(), man.Model, global2) })
	want = strings.Replace(want, "the tensors given", "the tensors of the checkpoint's model files", 1)
	refuses(t, "Reshard", want, func() error { _, err := Reshard(ctx, dir, t.TempDir(), WriteOptions{}); return err })
}

// writeMegatronPickle writes a Megatron checkpoint directory whose only rank file's
// data.pkl is pkl, deflated.
func writeMegatronPickle(t *testing.T, pkl []byte) (dir, file string) {
	t.Helper()
	dir = t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, TrackerFile), []byte("1"), 0o644))
	file = megatronRankFile(filepath.Join(dir, IterDir(1)), 0, -1)
	must(t, os.MkdirAll(filepath.Dir(file), 0o755))
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	zw.RegisterCompressor(zip.Deflate, func(w io.Writer) (io.WriteCloser, error) { return flate.NewWriter(w, flate.BestSpeed) })
	w, err := zw.CreateHeader(&zip.FileHeader{Name: "archive/data.pkl", Method: zip.Deflate})
	must(t, err)
	_, err = w.Write(pkl)
	must(t, err)
	must(t, zw.Close())
	must(t, os.WriteFile(file, buf.Bytes(), 0o644))
	return dir, file
}

// Pickles nested too deep, or that would make the unpickler allocate without bound,
// are refused by the scan, having allocated little more than the pickle itself.
func TestMegatronRefusesNestedPickles(t *testing.T) {
	const size = 8 << 20 // bytes of pickle: a zip of about 8 KB
	repeat := func(unit string, n int, tail string) []byte {
		return append(append([]byte("\x80\x02"), bytes.Repeat([]byte(unit), n/len(unit))...), tail...)
	}
	for _, tc := range []struct {
		name string
		pkl  []byte
		want string
	}{
		{"marks", repeat("(", size, "."), fmt.Sprintf("pickle: MARK at byte %d nests deeper than %d", 2+maxPickleDepth, maxPickleDepth)},
		{"lists", repeat("]", size, "."), fmt.Sprintf("pickle: opcode at byte %d leaves more than %d objects on the stack", 2+maxPickleStack, maxPickleStack)},
		{"mark and pop", repeat("(1", size, "."), fmt.Sprintf("pickle: opcode at byte %d would take the unpickler past %d bytes of allocations", 2+2*(maxPickleAlloc/allocMark), maxPickleAlloc)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, file := writeMegatronPickle(t, tc.pkl)
			want := "checkpoint: Megatron shard: " + file + ": " + tc.want
			refuses(t, "ImportMegatron", want, func() error { _, _, _, err := ImportMegatron(dir, MegatronOptions{}); return err })
		})
	}
	// An object that is its own state: reading attributes through it stops.
	self := []byte("\x80\x02cargparse\nNamespace\n)\x81q\x00h\x00b.")
	if v, err := unpickle(self, nil); err != nil {
		t.Fatal(err)
	} else if _, ok := attr(v, "args"); ok {
		t.Error("found an attribute in an object that has none")
	}
}
