package checkpoint_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"megago/checkpoint"
	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// Save a GPT from two tensor-parallel ranks, then load it into a one-rank model.
func Example() {
	dir, err := os.MkdirTemp("", "checkpoint")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	cfg := nn.GPTConfig{TransformerConfig: nn.TransformerConfig{NumLayers: 2, Hidden: 16, Heads: 4, Vocab: 50, MaxPosition: 8, Bias: true}}
	build := func(mesh *parallel.Mesh, seed uint64) *nn.GPT {
		b := &nn.Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(seed), TP: mesh.TP()}
		m, err := nn.NewGPT(b, cfg, nn.Stage{})
		if err != nil {
			panic(err)
		}
		return m
	}

	// Every rank saves its shards of iteration 100.
	err = parallel.RunLocal(2, func(world parallel.Comm) error {
		mesh, err := parallel.NewMesh(ctx, world, parallel.Sizes{TP: 2})
		if err != nil {
			return err
		}
		st := &checkpoint.State{Model: checkpoint.GPTModel(cfg), Params: build(mesh, 1).Params(),
			Iteration: 100, ConsumedSamples: 3200, Seed: 1}
		return checkpoint.Save(ctx, dir, mesh, st)
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	it, _ := checkpoint.LatestIteration(dir)
	man, _ := checkpoint.ReadManifest(filepath.Join(dir, checkpoint.IterDir(it)))
	fmt.Println(checkpoint.IterDir(it), "saved at TP", man.Layout.TP, slices.Sorted(func(yield func(string) bool) {
		for name := range man.Files {
			if !yield(name) {
				return
			}
		}
	}))

	// One rank loads it (its vocabulary is padded to 128 rows, not 256).
	mesh, _ := parallel.NewMesh(ctx, parallel.Self(), parallel.Sizes{TP: 1})
	m := build(mesh, 2)
	st := &checkpoint.State{Model: checkpoint.GPTModel(cfg), Params: m.Params()}
	if _, err := checkpoint.Load(ctx, dir, mesh, st, checkpoint.LoadOptions{}); err != nil {
		fmt.Println(err)
		return
	}
	want := build(mesh, 1) // initialization does not depend on the layout
	same := true
	for i, p := range m.Params() {
		same = same && tensor.AllClose(p.Tensor, want.Params()[i].Tensor, 0, 0)
	}
	fmt.Printf("loaded iteration %d at TP 1: %d samples consumed, the TP=2 weights: %v\n", st.Iteration, st.ConsumedSamples, same)
	// Output:
	// iter_0000100 saved at TP 2 [model_tp00_pp000.safetensors model_tp01_pp000.safetensors]
	// loaded iteration 100 at TP 1: 3200 samples consumed, the TP=2 weights: true
}
