package optim

import (
	"context"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// tinyGPT is a small GPT-2 for optimizer tests.
func tinyGPT(layers, hidden, vocab, seq int) nn.GPTConfig {
	return nn.GPTConfig{TransformerConfig: nn.TransformerConfig{NumLayers: layers, Hidden: hidden, Heads: 4,
		Vocab: vocab, MaxPosition: seq, Bias: true}, VocabMultiple: 1}
}

// newGPT builds cfg on a fresh CPU device with TP group tp.
func newGPT(cfg nn.GPTConfig, dt tensor.DType, tp parallel.Comm) (*nn.GPT, *tensor.Device, error) {
	dev := tensor.NewCPU()
	m, err := nn.NewGPT(&nn.Builder{Dev: dev, DType: dt, RNG: tensor.NewRNG(3), TP: tp}, cfg, nn.Stage{})
	return m, dev, err
}

// batch returns token ids and labels [rows, seq] for global sample rows [first,
// first+rows) of step: a deterministic sequence the model can partly learn.
func batch(dev *tensor.Device, step, first, rows, seq, vocab int) (ids, labels *tensor.Tensor) {
	in := make([]int64, rows*seq)
	out := make([]int64, rows*seq)
	for r := range rows {
		s := first + r
		for j := range seq {
			v := (s*31 + j*7 + step*13 + (s*j)%5) % vocab
			in[r*seq+j] = int64(v)
			out[r*seq+j] = int64((v*5 + 3 + (s+j)%3) % vocab)
		}
	}
	return tensor.FromSlice(dev, in, rows, seq), tensor.FromSlice(dev, out, rows, seq)
}

// forwardBackward runs one micro-batch and backward on its mean loss times scale, and
// returns the unscaled mean loss.
func forwardBackward(m *nn.GPT, opt *Optimizer, ids, labels *tensor.Tensor, scale float64) float64 {
	p := &nn.Pass{Ctx: context.Background(), Train: true, RNG: tensor.NewRNG(5)}
	logits := m.Forward(p, ids, nil)
	loss, _ := m.Loss(p, logits, labels)
	opt.ScaleLoss(tensor.Scale(loss, scale)).Backward()
	return loss.Item()
}

// shardOfGlobal returns the part of a TP=1 parameter that p, a TP shard, holds.
func shardOfGlobal(full *nn.Param, p *nn.Param) []float64 {
	if p.PartitionDim < 0 {
		return tensor.ToSlice[float64](full.Tensor)
	}
	d := p.PartitionDim
	return tensor.ToSlice[float64](full.Tensor.Narrow(d, p.Start()[d], p.Shape()[d]))
}
