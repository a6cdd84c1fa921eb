package nn

import (
	"fmt"

	"megago/tensor"
)

// HFConverter converts a model's parameters between megago's global (unsharded) layout,
// keyed by megago name, and Hugging Face's tensors and names (GPT-2, BERT, T5, Llama), for
// the checkpoint package and the golden tests. The conversions are exact rearrangements
// (transposes, splitting or fusing q/k/v per head group, removing or adding vocabulary
// padding), so they apply to gradients as well as to weights.
type HFConverter interface {
	// ToHF returns the Hugging Face tensors of the global parameters.
	ToHF(global map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error)
	// FromHF returns global megago parameters from Hugging Face tensors; an error names a
	// missing or mis-shaped tensor.
	FromHF(hf map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error)
	// HFConfig returns the Hugging Face config.json fields of the model.
	HFConfig() map[string]any
}

// LoadGlobal sets every parameter of ps to its shard (Param.Region) of the global tensor of
// the same name. It returns an error naming a missing or mis-shaped tensor.
func LoadGlobal(ps []*Param, global map[string]*tensor.Tensor) error {
	for _, p := range ps {
		g, ok := global[p.Name]
		if !ok {
			return fmt.Errorf("nn: LoadGlobal: no tensor for %s", p.Name)
		}
		if !g.Shape().Equal(p.GlobalShape) {
			return fmt.Errorf("nn: LoadGlobal: %s has shape %v, want %v", p.Name, g.Shape(), p.GlobalShape)
		}
		if p.PartitionDim >= 0 {
			d := p.PartitionDim
			g = g.Detach().Narrow(d, p.Start()[d], p.Dim(d))
		}
		p.Tensor.CopyFrom(g)
	}
	return nil
}
