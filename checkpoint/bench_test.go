package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"megago/nn"
	"megago/optim"
	"megago/parallel"
	"megago/tensor"
)

// benchState returns a one-rank State of a GPT-2 of the given depth and width (12 × 768
// with GPT-2's vocabulary of 50257 and 1024 positions is the 124M-parameter GPT-2 small)
// with F32 parameters and AdamW state (two moments): 12 bytes per parameter in total.
func benchState(b *testing.B, layers, hidden int) (*parallel.Mesh, *State, int64) {
	b.Helper()
	ctx := context.Background()
	mesh, err := parallel.NewMesh(ctx, parallel.Self(), parallel.Sizes{TP: 1, PP: 1})
	if err != nil {
		b.Fatal(err)
	}
	cfg := nn.GPTConfig{TransformerConfig: nn.TransformerConfig{NumLayers: layers, Hidden: hidden, Heads: hidden / 64,
		Vocab: 50257, MaxPosition: 1024, Bias: true}}
	dev := tensor.NewCPU()
	m, err := nn.NewGPT(&nn.Builder{Dev: dev, DType: tensor.F32, RNG: tensor.NewRNG(1), TP: mesh.TP()}, cfg, nn.Stage{})
	if err != nil {
		b.Fatal(err)
	}
	opt, err := optim.New(m.Params(), optim.Config{LR: 1e-4})
	if err != nil {
		b.Fatal(err)
	}
	n := int64(0)
	for _, p := range m.Params() {
		n += int64(p.Numel())
	}
	return mesh, &State{Model: GPTModel(cfg), Params: m.Params(), Optimizer: opt}, n * 12
}

// BenchmarkCheckpoint measures save and load throughput of a whole training state
// (parameters and AdamW moments) on one rank, in GB/s of checkpoint bytes: save
// includes writing, SHA-256 and fsync; load maps the files (from the page cache after
// the save), checks their checksums (not with load-noverify) and copies them into the
// parameters and the optimizer's state.
func BenchmarkCheckpoint(b *testing.B) {
	for _, size := range []struct {
		name           string
		layers, hidden int
	}{{"124M", 12, 768}, {"48M", 4, 512}} {
		b.Run(size.name, func(b *testing.B) {
			mesh, st, bytes := benchState(b, size.layers, size.hidden)
			dir := b.TempDir()
			ctx := context.Background()
			b.Run("save", func(b *testing.B) {
				b.SetBytes(bytes)
				for i := range b.N {
					st.Iteration = i
					if err := Save(ctx, dir, mesh, st); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(bytes)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
			for _, load := range []struct {
				name string
				opts LoadOptions
			}{{"load", LoadOptions{}}, {"load-noverify", LoadOptions{NoVerify: true}}} {
				b.Run(load.name, func(b *testing.B) {
					if _, err := LatestIteration(dir); err != nil { // -bench selected a load alone
						if err := Save(ctx, dir, mesh, st); err != nil {
							b.Fatal(err)
						}
					}
					b.SetBytes(bytes)
					b.ResetTimer()
					for range b.N {
						if _, err := Load(ctx, dir, mesh, st, load.opts); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(bytes)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
				})
			}
			files, _ := filepath.Glob(filepath.Join(dir, "iter_*", "*.safetensors"))
			var total int64
			for _, f := range files {
				if fi, err := os.Stat(f); err == nil {
					total += fi.Size()
				}
			}
			b.Logf("%d files, %.0f MB per checkpoint", len(files), float64(total)/1e6)
		})
	}
}
