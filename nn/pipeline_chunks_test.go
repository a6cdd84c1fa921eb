package nn

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/parallel"
	"megago/tensor"
)

// onMesh runs build on every rank of a mesh of sizes over two ranks (goroutines) with a
// Builder over the mesh's TP group, or over parallel.Self when selfTP is set.
func onMesh(sizes parallel.Sizes, selfTP bool, build func(b *Builder, m *parallel.Mesh) error) error {
	return parallel.RunLocal(2, func(world parallel.Comm) error {
		m, err := parallel.NewMesh(context.Background(), world, sizes)
		if err != nil {
			return err
		}
		b := &Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(1), TP: m.TP()}
		if selfTP {
			b.TP = parallel.Self()
		}
		return build(b, m)
	})
}

// TestMeshBuildersReject checks the errors of NewGPTChunks, NewBERTChunks and
// NewT5OnMesh for meshes they cannot build on.
func TestMeshBuildersReject(t *testing.T) {
	gpt := GPTConfig{TransformerConfig: TransformerConfig{NumLayers: 3, Hidden: 8, Heads: 2, Vocab: 16, MaxPosition: 4}}
	bert := NewBERTConfig(3, 8, 2, 16, 4)
	t5 := NewT5Config(2, 8, 2, 4, 12, 16)
	for _, tc := range []struct {
		name   string
		sizes  parallel.Sizes
		selfTP bool
		build  func(b *Builder, m *parallel.Mesh) error
		want   string
	}{
		{"gpt layers over stages", parallel.Sizes{PP: 2}, false, func(b *Builder, m *parallel.Mesh) error {
			_, err := NewGPTChunks(b, gpt, m, 1)
			return err
		}, "nn: 3 layers do not split evenly over 2 pipeline stages × 1 model chunks"},
		{"bert builder not on the mesh's TP", parallel.Sizes{TP: 2}, true, func(b *Builder, m *parallel.Mesh) error {
			_, err := NewBERTChunks(b, bert, m, 1)
			return err
		}, "nn: the Builder's TP group must be the mesh's TP group"},
		{"t5 under PP", parallel.Sizes{PP: 2}, false, func(b *Builder, m *parallel.Mesh) error {
			_, err := NewT5OnMesh(b, t5, m)
			if !errors.Is(err, errT5Pipeline) {
				return fmt.Errorf("not errT5Pipeline: %w", err)
			}
			return err
		}, "nn: T5 under pipeline parallelism is not supported; use TP and DP (PP=2)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorContains(t, onMesh(tc.sizes, tc.selfTP, tc.build), tc.want)
		})
	}
}

// TestGPTPartsTied checks the Parts of a tied GPT over two pipeline stages: the first
// stage's word embedding and the last stage's Shared copy of it (under the same name)
// are the Tied parameters, and each stage has one chunk holding all of its parameters.
func TestGPTPartsTied(t *testing.T) {
	cfg := GPTConfig{TransformerConfig: TransformerConfig{NumLayers: 2, Hidden: 8, Heads: 2, Vocab: 16, MaxPosition: 4}}
	err := onMesh(parallel.Sizes{PP: 2}, false, func(b *Builder, m *parallel.Mesh) error {
		chunks, err := NewGPTChunks(b, cfg, m, 1)
		if err != nil {
			return err
		}
		p := GPTParts(chunks)
		want := map[int]struct {
			name   string
			shared bool
		}{0: {"embedding.word.weight", false}, 1: {"embedding.word.weight", true}}[m.Coord().PP]
		switch {
		case len(p.Chunks) != 1 || len(p.Params()) != len(chunks[0].Params()):
			return fmt.Errorf("stage %d: %d chunks, %d parameters", m.Coord().PP, len(p.Chunks), len(p.Params()))
		case len(p.Tied) != 1 || p.Tied[0].Name != want.name || p.Tied[0].Shared != want.shared:
			return fmt.Errorf("stage %d: tied %v, want %s (shared %t)", m.Coord().PP, p.Tied, want.name, want.shared)
		}
		return nil
	})
	assert.NoError(t, err)
}
