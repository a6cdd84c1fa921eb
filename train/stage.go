package train

import (
	"fmt"

	"megago/nn"
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
		return 0, 0, fmt.Errorf("train: chunk %d of %d on stage %d of %d", chunk, chunks, stage, stages)
	case numLayers%(stages*chunks) != 0:
		return 0, 0, fmt.Errorf("train: %d layers do not split evenly over %d pipeline stages × %d model chunks", numLayers, stages, chunks)
	}
	n = numLayers / (stages * chunks)
	return chunk*numLayers/chunks + stage*n, n, nil
}

// Stages returns the nn.Stage of each of the chunks model chunks of pipeline stage stage:
// the embedding goes with chunk 0 of stage 0 and the final norm and head with chunk
// chunks−1 of the last stage (see ChunkLayers for the layers).
func Stages(numLayers, stages, stage, chunks int) ([]nn.Stage, error) {
	out := make([]nn.Stage, chunks)
	for v := range chunks {
		first, n, err := ChunkLayers(numLayers, stages, stage, chunks, v)
		if err != nil {
			return nil, err
		}
		out[v] = nn.Stage{PreProcess: stage == 0 && v == 0, PostProcess: stage == stages-1 && v == chunks-1,
			FirstLayer: first, NumLayers: n}
	}
	return out, nil
}

// checkBuilder rejects a Builder whose TP group is not the mesh's.
func checkBuilder(b *nn.Builder, m *parallel.Mesh) error {
	if b.TP == nil || b.TP.Size() != m.Sizes().TP || b.TP.Rank() != m.Coord().TP {
		return fmt.Errorf("train: the Builder's TP group must be the mesh's TP group (mesh %v)", m)
	}
	return nil
}

// NewGPTChunks builds this rank's part of a GPT on the mesh: one nn.GPT per model chunk
// (chunks = 1 without interleaving; Interleaved{V: chunks} runs them), holding the layers
// ChunkLayers assigns, the embedding on the first stage and the head on the last. With
// tied embeddings and PP > 1 the last stage holds a Shared copy of the word embedding,
// initialized identically; the Trainer keeps the two in sync over the embedding group.
func NewGPTChunks(b *nn.Builder, cfg nn.GPTConfig, m *parallel.Mesh, chunks int) ([]*nn.GPT, error) {
	if err := checkBuilder(b, m); err != nil {
		return nil, err
	}
	stages, err := Stages(cfg.NumLayers, m.Sizes().PP, m.Coord().PP, chunks)
	if err != nil {
		return nil, err
	}
	out := make([]*nn.GPT, chunks)
	for v, st := range stages {
		if out[v], err = nn.NewGPT(b, cfg, st); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// NewBERTChunks builds this rank's part of a BERT on the mesh, as NewGPTChunks does for
// a GPT: the embeddings on the first stage, the pooler and the heads (with the MLM
// output tied to a Shared copy of the word embedding) on the last.
func NewBERTChunks(b *nn.Builder, cfg nn.BERTConfig, m *parallel.Mesh, chunks int) ([]*nn.BERT, error) {
	if err := checkBuilder(b, m); err != nil {
		return nil, err
	}
	stages, err := Stages(cfg.NumLayers, m.Sizes().PP, m.Coord().PP, chunks)
	if err != nil {
		return nil, err
	}
	out := make([]*nn.BERT, chunks)
	for v, st := range stages {
		if out[v], err = nn.NewBERT(b, cfg, st); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// NewT5 builds a T5 on the mesh. T5 runs with tensor and data parallelism only (its
// encoder-decoder split across stages is out of scope): a mesh with PP > 1 is an error.
func NewT5(b *nn.Builder, cfg nn.T5Config, m *parallel.Mesh) (*nn.T5, error) {
	if pp := m.Sizes().PP; pp > 1 {
		return nil, fmt.Errorf("train: T5 under pipeline parallelism (PP=%d) is not supported; run it with TP and DP", pp)
	}
	if err := checkBuilder(b, m); err != nil {
		return nil, err
	}
	return nn.NewT5(b, cfg, nn.Stage{})
}

// Parts is what the Trainer needs to know of a model on this rank: the parameters of
// each model chunk, and the copies of tied weights (the word embedding on the first
// stage and its Shared copy on the last) whose gradients are summed over the embedding
// group.
type Parts struct {
	Chunks [][]*nn.Param
	Tied   []*nn.Param
}

// Params returns the parameters of every chunk, in order.
func (p Parts) Params() []*nn.Param {
	var out []*nn.Param
	for _, c := range p.Chunks {
		out = append(out, c...)
	}
	return out
}

// GPTParts returns the Parts of this rank's GPT chunks.
func GPTParts(ms []*nn.GPT) Parts {
	var p Parts
	for _, m := range ms {
		p.Chunks = append(p.Chunks, m.Params())
		switch {
		case m.Word != nil && m.Output == nil && !m.Config.Untied: // first stage; the head is elsewhere
			p.Tied = append(p.Tied, m.Word.Weight)
		case m.Output != nil && m.Output.Weight.Shared:
			p.Tied = append(p.Tied, m.Output.Weight)
		}
	}
	return p
}

// BERTParts returns the Parts of this rank's BERT chunks.
func BERTParts(ms []*nn.BERT) Parts {
	var p Parts
	for _, m := range ms {
		p.Chunks = append(p.Chunks, m.Params())
		switch {
		case m.Word != nil && m.LMOutput == nil:
			p.Tied = append(p.Tied, m.Word.Weight)
		case m.LMOutput != nil && m.LMOutput.Weight.Shared:
			p.Tied = append(p.Tied, m.LMOutput.Weight)
		}
	}
	return p
}
