package nn

import (
	"fmt"

	"megago/parallel"
)

// ChunkLayers returns the transformer layers [first, first+n) that model chunk chunk of
// pipeline stage stage holds when numLayers layers are split over stages stages with
// chunks chunks each (chunks = 1 without interleaving), as Megatron assigns them:
// n = L/(p·V) and first = chunk·L/V + stage·n. It returns an error if L is not
// divisible by p·V or the indices are out of range.
func ChunkLayers(numLayers, stages, stage, chunks, chunk int) (first, n int, err error) {
	switch {
	case stages < 1 || chunks < 1 || stage < 0 || stage >= stages || chunk < 0 || chunk >= chunks:
		return 0, 0, fmt.Errorf("nn: chunk %d of %d on stage %d of %d", chunk, chunks, stage, stages)
	case numLayers%(stages*chunks) != 0:
		return 0, 0, fmt.Errorf("nn: %d layers do not split evenly over %d pipeline stages × %d model chunks", numLayers, stages, chunks)
	}
	n = numLayers / (stages * chunks)
	return chunk*numLayers/chunks + stage*n, n, nil
}

// Stages returns the Stage of each of the chunks model chunks of pipeline stage stage:
// the embedding goes with chunk 0 of stage 0 and the final norm and head with chunk
// chunks−1 of the last stage (see ChunkLayers for the layers).
func Stages(numLayers, stages, stage, chunks int) ([]Stage, error) {
	out := make([]Stage, chunks)
	for v := range chunks {
		first, n, err := ChunkLayers(numLayers, stages, stage, chunks, v)
		if err != nil {
			return nil, err
		}
		out[v] = Stage{PreProcess: stage == 0 && v == 0, PostProcess: stage == stages-1 && v == chunks-1,
			FirstLayer: first, NumLayers: n}
	}
	return out, nil
}

// checkMesh rejects a Builder whose TP or CP group is not the mesh's.
func checkMesh(b *Builder, m *parallel.Mesh) error {
	if b.TP == nil || b.TP.Size() != m.Sizes().TP || b.TP.Rank() != m.Coord().TP {
		return fmt.Errorf("nn: the Builder's TP group must be the mesh's TP group (mesh %v)", m)
	}
	cp, rank := 1, 0
	if b.CP != nil {
		cp, rank = b.CP.Size(), b.CP.Rank()
	}
	if cp != max(m.Sizes().CP, 1) || rank != m.Coord().CP {
		return fmt.Errorf("nn: the Builder's CP group must be the mesh's CP group (mesh %v)", m)
	}
	return nil
}

// NewGPTChunks builds this rank's part of a GPT on the mesh: one GPT per model chunk
// (chunks = 1 without interleaving; parallel.Interleaved{V: chunks} runs them), holding
// the layers ChunkLayers assigns, the embedding on the first stage and the head on the
// last. With tied embeddings and PP > 1 the last stage holds a Shared copy of the word
// embedding, initialized identically (a trainer keeps the two in sync over the
// embedding group: see Parts). It returns an error if b's TP group is not m's or the
// layers do not split over the stages and chunks.
func NewGPTChunks(b *Builder, cfg GPTConfig, m *parallel.Mesh, chunks int) ([]*GPT, error) {
	return newChunks(b, cfg, cfg.NumLayers, m, chunks, NewGPT)
}

// NewBERTChunks builds this rank's part of a BERT on the mesh, as NewGPTChunks does for
// a GPT: the embeddings on the first stage, the pooler and the heads (with the MLM
// output tied to a Shared copy of the word embedding) on the last.
func NewBERTChunks(b *Builder, cfg BERTConfig, m *parallel.Mesh, chunks int) ([]*BERT, error) {
	return newChunks(b, cfg, cfg.NumLayers, m, chunks, NewBERT)
}

// newChunks builds with newModel the model of cfg (numLayers layers) for each of this
// rank's chunks model chunks on m.
func newChunks[C, M any](b *Builder, cfg C, numLayers int, m *parallel.Mesh, chunks int,
	newModel func(*Builder, C, Stage) (M, error)) ([]M, error) {
	if err := checkMesh(b, m); err != nil {
		return nil, err
	}
	stages, err := Stages(numLayers, m.Sizes().PP, m.Coord().PP, chunks)
	if err != nil {
		return nil, err
	}
	out := make([]M, chunks)
	for v, st := range stages {
		if out[v], err = newModel(b, cfg, st); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// NewT5OnMesh builds a T5 on the mesh: the whole model on every rank, tensor-parallel
// over the mesh's TP group. T5 runs with tensor and data parallelism only (its
// encoder-decoder split across stages is not implemented): a mesh with PP > 1 is an
// error, as is a Builder whose TP group is not the mesh's.
func NewT5OnMesh(b *Builder, cfg T5Config, m *parallel.Mesh) (*T5, error) {
	if pp := m.Sizes().PP; pp > 1 {
		return nil, fmt.Errorf("%w (PP=%d)", errT5Pipeline, pp)
	}
	if err := checkMesh(b, m); err != nil {
		return nil, err
	}
	return NewT5(b, cfg, Stage{})
}
