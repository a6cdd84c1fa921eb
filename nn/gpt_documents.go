package nn

import (
	"fmt"

	"megago/tensor"
)

// Documents describes the documents packed into the sequences of a micro-batch, as
// Megatron's --reset-position-ids and --reset-attention-mask do: each token's position
// within its document and the document it belongs to. The zero Documents is one
// document per sequence (positions 0..T−1, causal attention over the whole sequence).
type Documents struct {
	// Positions, if not nil, are each token's position [B, T] (I32 or I64), e.g.
	// restarting at 0 after each end-of-document token: the learned position embedding
	// gathers them (first stage), RoPE rotates queries and keys by them (every stage).
	Positions *tensor.Tensor
	// Segments, if not nil, are each token's document [B, T] (I32): a token attends only
	// to earlier tokens of its own document (tensor.AttentionOptions.Segments). Every
	// stage reads them.
	Segments *tensor.Tensor
}

// ForwardDocuments is Forward without KV caches for a micro-batch whose sequences pack
// the documents d: input is as for Forward (token ids [B, T] on the first stage, hidden
// states on the others), and every stage takes the micro-batch's d. With the zero
// Documents it is Forward, bit for bit. It panics if d's tensors are not [B, T].
func (m *GPT) ForwardDocuments(p *Pass, input *tensor.Tensor, d Documents) *tensor.Tensor {
	return m.forward(p, input, d, nil)
}

// mask returns the self-attention mask of d: causal, within d's documents.
func (d Documents) mask() AttentionMask {
	m := AttentionMask{Causal: true, Segments: d.Segments}
	if d.Positions != nil {
		m.PositionIDs = positionRows(d.Positions)
	}
	return m
}

// positionRows returns the rows of positions [B, T] as B slices of T ints.
func positionRows(positions *tensor.Tensor) [][]int {
	if positions.Rank() != 2 {
		panic(fmt.Sprintf("nn: GPT: positions %v %v, want [B, T]", positions.DType(), positions.Shape()))
	}
	all := tensor.ToSlice[int64](positions)
	b, t := positions.Dim(0), positions.Dim(1)
	rows := make([][]int, b)
	for i := range rows {
		rows[i] = make([]int, t)
		for j, v := range all[i*t : (i+1)*t] {
			rows[i][j] = int(v)
		}
	}
	return rows
}

// addPositionIDs adds the learned embeddings of positions ids [B, T] to x [B, T, C]. It
// panics if ids is not [B, T] or an id is outside [0, MaxPosition).
func (m *GPT) addPositionIDs(x, ids *tensor.Tensor) *tensor.Tensor {
	if !ids.Shape().Equal(tensor.Shape{x.Dim(0), x.Dim(1)}) {
		panic(fmt.Sprintf("nn: GPT: positions %v for tokens %v", ids.Shape(), x.Shape()[:2]))
	}
	for _, v := range tensor.ToSlice[int64](ids) {
		if v < 0 || v >= int64(m.Config.MaxPosition) {
			panic(fmt.Sprintf("nn: GPT: position %d outside [0, MaxPosition = %d)", v, m.Config.MaxPosition))
		}
	}
	beforeForward(m.Position)
	return tensor.Add(x, m.Position.Forward(ids)) // [B, T, C]
}
