package train

import (
	"fmt"

	"megago/nn"
	"megago/parallel"
)

// The layer split and the builders of a model on a mesh live in package nn (so that
// package checkpoint can build a model without importing train); the functions here
// keep train's API and call them.

// ChunkLayers returns the transformer layers [first, first+n) that model chunk chunk of
// pipeline stage stage holds: see nn.ChunkLayers.
func ChunkLayers(numLayers, stages, stage, chunks, chunk int) (first, n int, err error) {
	return nn.ChunkLayers(numLayers, stages, stage, chunks, chunk)
}

// Stages returns the nn.Stage of each of the chunks model chunks of pipeline stage stage:
// see nn.Stages.
func Stages(numLayers, stages, stage, chunks int) ([]nn.Stage, error) {
	return nn.Stages(numLayers, stages, stage, chunks)
}

// NewGPTChunks builds this rank's part of a GPT on the mesh, one nn.GPT per model chunk
// (Interleaved{V: chunks} runs them): see nn.NewGPTChunks. With tied embeddings and
// PP > 1 the Trainer keeps the first stage's word embedding and the last stage's Shared
// copy in sync over the embedding group.
func NewGPTChunks(b *nn.Builder, cfg nn.GPTConfig, m *parallel.Mesh, chunks int) ([]*nn.GPT, error) {
	return nn.NewGPTChunks(b, cfg, m, chunks)
}

// NewBERTChunks builds this rank's part of a BERT on the mesh: see nn.NewBERTChunks.
func NewBERTChunks(b *nn.Builder, cfg nn.BERTConfig, m *parallel.Mesh, chunks int) ([]*nn.BERT, error) {
	return nn.NewBERTChunks(b, cfg, m, chunks)
}

// NewT5 builds a T5 on the mesh (nn.NewT5OnMesh). The Trainer runs T5 with tensor and
// data parallelism only (its encoder-decoder split across stages is out of scope): a
// mesh with PP > 1 is an error.
func NewT5(b *nn.Builder, cfg nn.T5Config, m *parallel.Mesh) (*nn.T5, error) {
	if pp := m.Sizes().PP; pp > 1 {
		return nil, fmt.Errorf("train: T5 under pipeline parallelism (PP=%d) is not supported; run it with TP and DP", pp)
	}
	return nn.NewT5OnMesh(b, cfg, m)
}

// Parts is what the Trainer needs to know of a model on this rank: the parameters of
// each model chunk and the copies of tied weights whose gradients are summed over the
// embedding group. It is nn.Parts, which package checkpoint uses too.
type Parts = nn.Parts

// GPTParts returns the Parts of this rank's GPT chunks: see nn.GPTParts.
func GPTParts(ms []*nn.GPT) Parts { return nn.GPTParts(ms) }

// BERTParts returns the Parts of this rank's BERT chunks: see nn.BERTParts.
func BERTParts(ms []*nn.BERT) Parts { return nn.BERTParts(ms) }
