package data

import "context"

// GPTBatch is a micro-batch of B GPT samples of T tokens, row-major. Attention is causal
// over each row (and within each document with GPTConfig.ResetAttentionMask: Segments),
// so the batch carries no attention mask.
type GPTBatch struct {
	B, T        int
	Indices     []int     // [B] dataset sample indices
	Tokens      []int32   // [B*T]
	Labels      []int32   // [B*T]
	LossMask    []float32 // [B*T]
	PositionIDs []int32   // [B*T]
	Segments    []int32   // [B*T] with GPTConfig.ResetAttentionMask, else nil
}

// Row returns sample b of the batch as views into its slices.
func (g GPTBatch) Row(b int) GPTSample {
	lo, hi := b*g.T, (b+1)*g.T
	s := GPTSample{
		Tokens: g.Tokens[lo:hi:hi], Labels: g.Labels[lo:hi:hi],
		LossMask: g.LossMask[lo:hi:hi], PositionIDs: g.PositionIDs[lo:hi:hi],
	}
	if g.Segments != nil {
		s.Segments = g.Segments[lo:hi:hi]
	}
	return s
}

// CollateGPT returns a Loader collate function that reads the samples of a micro-batch
// from ds (a *GPTDataset or a *BlendedDataset[GPTSample]) into a GPTBatch. It stops with
// the context's error when ctx is done, and with the dataset's error (which names the
// dataset, the sample and the offset) when a sample cannot be read.
func CollateGPT(ds Dataset[GPTSample]) func(ctx context.Context, indices []int) (GPTBatch, error) {
	return func(ctx context.Context, indices []int) (GPTBatch, error) {
		g := GPTBatch{B: len(indices), Indices: indices}
		for k, i := range indices {
			if err := ctx.Err(); err != nil {
				return GPTBatch{}, err
			}
			s, err := ds.ReadSample(i)
			if err != nil {
				return GPTBatch{}, err
			}
			if k == 0 {
				g.T = len(s.Tokens)
				n := g.B * g.T
				g.Tokens, g.Labels = make([]int32, 0, n), make([]int32, 0, n)
				g.LossMask, g.PositionIDs = make([]float32, 0, n), make([]int32, 0, n)
			}
			g.Tokens = append(g.Tokens, s.Tokens...)
			g.Labels = append(g.Labels, s.Labels...)
			g.LossMask = append(g.LossMask, s.LossMask...)
			g.PositionIDs = append(g.PositionIDs, s.PositionIDs...)
			if s.Segments != nil {
				g.Segments = append(g.Segments, s.Segments...)
			}
		}
		return g, nil
	}
}

// CollateSamples returns a Loader collate function that gathers the samples of a
// micro-batch from ds as a slice, for sample types (BERTSample, T5Sample) that callers
// lay out themselves. Errors are as CollateGPT's.
func CollateSamples[S any](ds Dataset[S]) func(ctx context.Context, indices []int) ([]S, error) {
	return func(ctx context.Context, indices []int) ([]S, error) {
		out := make([]S, len(indices))
		for k, i := range indices {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			s, err := ds.ReadSample(i)
			if err != nil {
				return nil, err
			}
			out[k] = s
		}
		return out, nil
	}
}
