package checkpoint

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"megago/nn"
)

// Corrupt or mismatched checkpoints are refused with an error that says what is wrong,
// on every rank, before any parameter is changed.
func TestCorruptCheckpoints(t *testing.T) {
	l := layout{tp: 2, pp: 1, dp: 1}
	good := t.TempDir()
	runLayout(t, l, func(ctx context.Context, r *rig) error {
		if _, err := r.step(ctx, 0); err != nil {
			return err
		}
		return Save(ctx, good, r.mesh, r.st)
	})
	iter := IterDir(1)
	file := func(dir, name string) string { return filepath.Join(dir, iter, name) }
	model0, model1, optim1 := modelFile(0, 0), modelFile(1, 0), optimFile(1, 0, 0)
	for _, tc := range []struct {
		name   string
		mutate func(t *testing.T, dir string)
		model  func(c *nn.GPTConfig) // loads into another model, if set
		want   string
	}{
		{name: "truncated shard", want: "truncated", mutate: func(t *testing.T, dir string) {
			st, err := os.Stat(file(dir, model1))
			must(t, err)
			must(t, os.Truncate(file(dir, model1), st.Size()-100))
		}},
		{name: "wrong checksum", want: "checksum mismatch", mutate: func(t *testing.T, dir string) {
			b := readFile(t, file(dir, model0))
			b[len(b)-3] ^= 0x40 // a bit of the last tensor's data
			must(t, os.WriteFile(file(dir, model0), b, 0o644))
		}},
		{name: "header lies about an offset", want: "safetensors:", mutate: func(t *testing.T, dir string) {
			b := readFile(t, file(dir, optim1))
			n := binary.LittleEndian.Uint64(b)
			hdr := string(b[8 : 8+n])
			i := strings.Index(hdr, `"data_offsets":[0,`)
			if i < 0 {
				t.Fatal("no tensor at offset 0")
			}
			hdr = hdr[:i] + `"data_offsets":[4,` + hdr[i+len(`"data_offsets":[0,`):]
			must(t, os.WriteFile(file(dir, optim1), append(append(b[:8:8], hdr...), b[8+n:]...), 0o644))
		}},
		{name: "header lies about its length", want: "header length", mutate: func(t *testing.T, dir string) {
			b := readFile(t, file(dir, model0))
			binary.LittleEndian.PutUint64(b, uint64(len(b)))
			must(t, os.WriteFile(file(dir, model0), b, 0o644))
		}},
		{name: "missing shard", want: "missing", mutate: func(t *testing.T, dir string) {
			must(t, os.Remove(file(dir, model1)))
		}},
		{name: "missing optimizer shard", want: "missing", mutate: func(t *testing.T, dir string) {
			must(t, os.Remove(file(dir, optim1)))
		}},
		{name: "no manifest", want: "not a complete megago checkpoint", mutate: func(t *testing.T, dir string) {
			must(t, os.Remove(file(dir, ManifestFile)))
		}},
		{name: "bad tracker", want: "not an iteration number", mutate: func(t *testing.T, dir string) {
			must(t, os.WriteFile(filepath.Join(dir, TrackerFile), []byte("release\n"), 0o644))
		}},
		{name: "other depth", want: "another gpt architecture: NumLayers 2, not 4", model: func(c *nn.GPTConfig) { c.NumLayers = 4 }},
		{name: "other experts", want: "another gpt architecture: MoE.NumExperts unset, not 4 (", model: func(c *nn.GPTConfig) {
			c.MoE = nn.MoEConfig{NumExperts: 4, EP: 2}
		}},
		{name: "other positions", want: "Position 0, not 1", model: func(c *nn.GPTConfig) {
			c.Position, c.MaxPosition = nn.RoPE, 0
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			copyDir(t, good, dir)
			if tc.mutate != nil {
				tc.mutate(t, dir)
			}
			err := tryLayout(l, func(ctx context.Context, r *rig) error {
				if tc.model != nil {
					c := harnessConfig(false)
					tc.model(&c)
					r.st.Model = GPTModel(c)
				}
				before := paramSum(r)
				_, err := Load(ctx, dir, r.mesh, r.st, LoadOptions{})
				if err != nil && paramSum(r) != before {
					t.Errorf("a failed load changed the parameters")
				}
				return err
			})
			t.Logf("%v", err)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	t.Run("other architecture", func(t *testing.T) {
		err := tryLayout(l, func(ctx context.Context, r *rig) error {
			r.st.Model = BERTModel(nn.NewBERTConfig(2, 16, 4, hVocab, hSeq))
			_, err := Load(ctx, good, r.mesh, r.st, LoadOptions{})
			return err
		})
		if err == nil || !strings.Contains(err.Error(), `holds a "gpt" model, not a "bert"`) {
			t.Errorf("got %v", err)
		}
	})
	t.Run("weights only", func(t *testing.T) {
		runLayout(t, l, func(ctx context.Context, r *rig) error {
			r.st.Iteration = 7
			if _, err := Load(ctx, good, r.mesh, r.st, LoadOptions{WeightsOnly: true}); err != nil {
				return err
			}
			if r.st.Iteration != 7 || r.tr.Optimizer().Steps() != 0 {
				t.Errorf("a weights-only load set iteration %d, optimizer steps %d", r.st.Iteration, r.tr.Optimizer().Steps())
			}
			return nil
		})
	})
}

// paramSum returns a checksum of the rank's parameter values.
func paramSum(r *rig) float64 {
	s := 0.0
	for _, p := range r.st.Params {
		vals := p.Tensor.Detach()
		for i, v := range tensorF64(vals) {
			s += v * float64(i%7+1)
		}
	}
	return s
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	return b
}

// copyDir copies the directory tree src into dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	must(t, filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	}))
}
