package checkpoint

import (
	"fmt"
	"maps"

	"megago/nn"
	"megago/tensor"
)

// Hugging Face names of what nn's Llama mapping (nn.GPT's HFConverter) does not name:
// the MoE blocks of Mixtral, Qwen2-MoE and Qwen3-MoE and Qwen3's query/key norms.
//
//	megago (E experts, F expert hidden, C hidden)   Mixtral: model.layers.i.block_sparse_moe.…   Qwen-MoE: model.layers.i.mlp.…
//	layers.i.mlp.router.weight [E, C]               gate.weight                                  gate.weight
//	layers.i.mlp.experts.gate.weight [E, F, C]      experts.j.w1.weight [F, C], j < E             experts.j.gate_proj.weight
//	layers.i.mlp.experts.fc1.weight [E, F, C]       experts.j.w3.weight [F, C]                    experts.j.up_proj.weight
//	layers.i.mlp.experts.fc2.weight [E, C, F]       experts.j.w2.weight [C, F]                    experts.j.down_proj.weight
//	layers.i.mlp.shared_expert.{gate,fc1,fc2}.weight                                              shared_expert.{gate,up,down}_proj.weight (Qwen2-MoE)
//	layers.i.mlp.shared_expert_gate.weight [1, C]                                                 shared_expert_gate.weight (Qwen2-MoE)
//	layers.i.attn.{q,k}_norm.weight [HS]            model.layers.i.self_attn.{q,k}_norm.weight (Qwen3, Qwen3-MoE)
//
// Each expert tensor of megago is the stack along dim 0 of the E per-expert tensors of
// Hugging Face. A layer without experts (Qwen-MoE's mlp_only_layers) keeps the dense
// Llama names, which nn maps.

// llamaMLP pairs nn.MLP's SwiGLU parameters with a Llama MLP's projections, as nn's
// Llama mapping does for the dense MLP: gate ↔ gate_proj, fc1 ↔ up_proj, fc2 ↔ down_proj.
var llamaMLP = [][2]string{{"gate", "gate_proj"}, {"fc1", "up_proj"}, {"fc2", "down_proj"}}

// mixtralExpert is llamaMLP under Mixtral's names: w1 is the gate, w3 the up projection,
// w2 the down projection.
var mixtralExpert = [][2]string{{"gate", "w1"}, {"fc1", "w3"}, {"fc2", "w2"}}

// hfStack maps the megago tensor name to the Hugging Face tensor hf[0] (one name) or to
// the stack along dim 0 of hf[0], hf[1], … (stacked).
type hfStack struct {
	name    string
	hf      []string
	stacked bool
}

// llamaExtras is the HFConverter of a Llama-style GPT with experts or query/key norms:
// nn's converter for the rest (embedding, attention, norms, dense MLPs, head), this file's
// rules for those. nn's mapping names a dense MLP in every layer; for the MoE layers,
// whose dense MLP does not exist, it converts placeholders that are dropped after.
type llamaExtras struct {
	*nn.GPT
}

// gptConverter returns the HFConverter of the whole GPT of configuration c built by b:
// the model itself, or llamaExtras around a Llama-style one with experts or query/key
// norms.
func gptConverter(b *nn.Builder, c nn.GPTConfig) (nn.HFConverter, error) {
	g, err := nn.NewGPT(b, c, nn.Stage{})
	switch {
	case err != nil:
		return nil, err
	case c.Position != nn.RoPE || c.MoE.NumExperts == 0 && !c.QKNorm:
		return g, nil
	}
	return llamaExtras{g}, nil
}

// hfExtraRules returns the rules of the tensors of a GPT of configuration c that nn's
// Llama mapping does not name, and the dense MLP names (megago, Hugging Face) of its MoE
// layers, which that mapping names but which do not exist. It refuses a configuration
// Hugging Face has no class for.
func hfExtraRules(c nn.GPTConfig) (rules []hfStack, absent [][2]string, err error) {
	kind, err := gptHFType(c)
	if err != nil {
		return nil, nil, err
	}
	for i := range c.NumLayers {
		l, h := fmt.Sprintf("layers.%d.", i), fmt.Sprintf("model.layers.%d.", i)
		if c.QKNorm {
			for _, n := range []string{"q_norm", "k_norm"} {
				rules = append(rules, hfStack{name: l + "attn." + n + ".weight", hf: []string{h + "self_attn." + n + ".weight"}})
			}
		}
		if !c.MoE.IsMoELayer(i, c.NumLayers) {
			continue
		}
		for _, p := range llamaMLP {
			absent = append(absent, [2]string{l + "mlp." + p[0] + ".weight", h + "mlp." + p[1] + ".weight"})
		}
		rules = append(rules, moeLayerRules(kind, c.MoE, l+"mlp.", h)...)
	}
	return rules, absent, nil
}

// moeLayerRules returns the rules of one MoE block of a model of type kind: megago's
// prefix l ("layers.i.mlp."), Hugging Face's layer prefix h ("model.layers.i.").
func moeLayerRules(kind string, m nn.MoEConfig, l, h string) []hfStack {
	block, names := h+"mlp.", llamaMLP
	if kind == "mixtral" {
		block, names = h+"block_sparse_moe.", mixtralExpert
	}
	rs := []hfStack{{name: l + "router.weight", hf: []string{block + "gate.weight"}}}
	for _, p := range names {
		r := hfStack{name: l + "experts." + p[0] + ".weight", stacked: true}
		for j := range m.NumExperts {
			r.hf = append(r.hf, fmt.Sprintf("%sexperts.%d.%s.weight", block, j, p[1]))
		}
		rs = append(rs, r)
	}
	if m.SharedExpertFFNHidden > 0 {
		for _, p := range llamaMLP {
			rs = append(rs, hfStack{name: l + "shared_expert." + p[0] + ".weight", hf: []string{block + "shared_expert." + p[1] + ".weight"}})
		}
	}
	if m.SharedExpertGate {
		rs = append(rs, hfStack{name: l + "shared_expert_gate.weight", hf: []string{block + "shared_expert_gate.weight"}})
	}
	return rs
}

// ToHF converts global megago parameters to Hugging Face's tensors.
func (x llamaExtras) ToHF(global map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
	rules, absent, err := hfExtraRules(x.Config)
	if err != nil {
		return nil, err
	}
	out, err := viaNN(global, absent, 0, x.GPT.ToHF)
	if err != nil {
		return nil, err
	}
	for _, r := range rules {
		t, ok := global[r.name]
		if !ok {
			return nil, fmt.Errorf("checkpoint: Hugging Face conversion: no tensor %q", r.name)
		}
		if !r.stacked {
			out[r.hf[0]] = t.Detach()
			continue
		}
		if t.Rank() < 1 || t.Dim(0) != len(r.hf) {
			return nil, fmt.Errorf("checkpoint: Hugging Face conversion: %s has shape %v, want %d experts in dim 0", r.name, t.Shape(), len(r.hf))
		}
		for j, h := range r.hf {
			out[h] = t.Detach().Narrow(0, j, 1).Squeeze(0) // a view: dim 0 is outermost
		}
	}
	return out, nil
}

// FromHF converts Hugging Face's tensors to global megago parameters; an error names a
// missing tensor or experts of different shapes or dtypes.
func (x llamaExtras) FromHF(hf map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
	rules, absent, err := hfExtraRules(x.Config)
	if err != nil {
		return nil, err
	}
	out, err := viaNN(hf, absent, 1, x.GPT.FromHF)
	if err != nil {
		return nil, err
	}
	for _, r := range rules {
		t, err := stackHF(hf, r)
		if err != nil {
			return nil, err
		}
		out[r.name] = t
	}
	return out, nil
}

// viaNN converts src, keyed by side from of absent's pairs (0 megago, 1 Hugging Face),
// with convert, nn's mapping, giving it a placeholder under each absent name of that side
// and dropping what it converts them to.
func viaNN(src map[string]*tensor.Tensor, absent [][2]string, from int,
	convert func(map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error)) (map[string]*tensor.Tensor, error) {
	in := maps.Clone(src)
	placeholder := tensor.Zeros(tensor.NewCPU(), tensor.F32, 1)
	for _, a := range absent {
		in[a[from]] = placeholder
	}
	out, err := convert(in)
	if err != nil {
		return nil, err
	}
	for _, a := range absent {
		delete(out, a[1-from])
	}
	return out, nil
}

// stackHF returns the megago tensor of rule r from the Hugging Face tensors hf: the one
// tensor, or the stack of the experts' [E, ...], which must agree in shape and dtype.
func stackHF(hf map[string]*tensor.Tensor, r hfStack) (*tensor.Tensor, error) {
	parts := make([]*tensor.Tensor, len(r.hf))
	for j, h := range r.hf {
		t, ok := hf[h]
		if !ok {
			return nil, fmt.Errorf("checkpoint: Hugging Face conversion: no tensor %q", h)
		}
		if j > 0 && (!t.Shape().Equal(parts[0].Shape()) || t.DType() != parts[0].DType() || t.Device() != parts[0].Device()) {
			return nil, fmt.Errorf("checkpoint: Hugging Face conversion: %s is %v %v, but %s is %v %v", h, t.DType(), t.Shape(), r.hf[0], parts[0].DType(), parts[0].Shape())
		}
		parts[j] = t.Detach()
	}
	if !r.stacked {
		return parts[0], nil
	}
	for j, t := range parts {
		parts[j] = t.Unsqueeze(0) // [1, ...]
	}
	return tensor.Concat(0, parts...), nil // [E, ...]
}
