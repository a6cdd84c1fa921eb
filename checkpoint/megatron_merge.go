package checkpoint

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"megago/nn"
	"megago/tensor"
)

// How a Megatron tensor is split over TP ranks.
type tpSplit uint8

const (
	tpReplicated tpSplit = iota // every rank holds it whole (norms, positions, row-parallel biases)
	tpColumn                    // dim 0 (column-parallel weights and biases, the vocabulary)
	tpRow                       // dim 1 (row-parallel weights)
	tpGateUp                    // SwiGLU fc1: each rank holds [its gate rows; its up rows]
)

// megatronName maps a Megatron-core name (layers numbered globally) to megago's, with
// its TP split. For SwiGLU's fused fc1 the megago name is the up projection's (fc1); its
// gate goes to the same name with "fc1" replaced by "gate".
func megatronName(name string, swiglu bool) (string, tpSplit, error) {
	switch name {
	case "embedding.word_embeddings.weight":
		return "embedding.word.weight", tpColumn, nil
	case "embedding.position_embeddings.weight":
		return "embedding.position.weight", tpReplicated, nil
	case "decoder.final_layernorm.weight", "decoder.final_layernorm.bias":
		return "final_norm." + name[len("decoder.final_layernorm."):], tpReplicated, nil
	case "output_layer.weight":
		return "output.weight", tpColumn, nil
	}
	rest, ok := strings.CutPrefix(name, "decoder.layers.")
	i, sub, ok2 := strings.Cut(rest, ".")
	if ok && ok2 {
		l := "layers." + i + "."
		for _, r := range []struct {
			megatron, megago string
			split            tpSplit
		}{
			{"input_layernorm.", "norm1.", tpReplicated},
			{"self_attention.linear_qkv.layer_norm_", "norm1.", tpReplicated}, // Transformer Engine's fused norm
			{"self_attention.linear_qkv.", "attn.qkv.", tpColumn},
			{"self_attention.linear_proj.weight", "attn.proj.weight", tpRow},
			{"self_attention.linear_proj.bias", "attn.proj.bias", tpReplicated},
			{"self_attention.q_layernorm.", "attn.q_norm.", tpReplicated},
			{"self_attention.k_layernorm.", "attn.k_norm.", tpReplicated},
			{"pre_mlp_layernorm.", "norm2.", tpReplicated},
			{"mlp.linear_fc1.layer_norm_", "norm2.", tpReplicated},
			{"mlp.linear_fc1.", "mlp.fc1.", tpColumn},
			{"mlp.linear_fc2.weight", "mlp.fc2.weight", tpRow},
			{"mlp.linear_fc2.bias", "mlp.fc2.bias", tpReplicated},
		} {
			if tail, ok := strings.CutPrefix(sub, r.megatron); ok {
				split := r.split
				if swiglu && r.megago == "mlp.fc1." {
					split = tpGateUp
				}
				return l + r.megago + tail, split, nil
			}
		}
	}
	return "", 0, fmt.Errorf("Megatron tensor %s has no megago equivalent", name)
}

// mergeMegatron merges every rank's tensors into megago's global parameters.
func mergeMegatron(shards []megatronShard, cfg nn.GPTConfig, info *MegatronInfo) (map[string]*tensor.Tensor, error) {
	if cfg.NumLayers%info.PP != 0 {
		return nil, fmt.Errorf("%d layers do not split evenly over %d pipeline stages", cfg.NumLayers, info.PP)
	}
	per := cfg.NumLayers / info.PP
	parts := map[string][]*torchTensor{} // by global Megatron name, per TP rank
	for _, sh := range shards {
		for name, t := range sh.tensors {
			if rest, ok := strings.CutPrefix(name, "decoder.layers."); ok {
				i, sub, _ := strings.Cut(rest, ".")
				n, err := strconv.Atoi(i)
				if err != nil || n < 0 || n >= per {
					return nil, fmt.Errorf("%s on stage %d, which holds %d layers", name, sh.pp, per)
				}
				name = fmt.Sprintf("decoder.layers.%d.%s", sh.pp*per+n, sub)
			}
			if name == "output_layer.weight" && !cfg.Untied {
				continue // the last stage's copy of the tied word embedding
			}
			if strings.HasSuffix(name, "._extra_state") {
				continue
			}
			if parts[name] == nil {
				parts[name] = make([]*torchTensor, info.TP)
			}
			if parts[name][sh.tp] != nil {
				return nil, fmt.Errorf("%s appears on two pipeline stages", name)
			}
			parts[name][sh.tp] = t
			if info.DType == 0 {
				info.DType = t.DType
			}
			if strings.Contains(name, ".layer_norm_") {
				info.TransformerEngineKeys = true
			}
		}
	}
	dev := tensor.NewCPU()
	out := map[string]*tensor.Tensor{}
	for _, name := range sortedKeys(parts) {
		if err := mergeMegatronTensor(dev, name, parts[name], cfg, info, out); err != nil {
			return nil, err
		}
	}
	for _, name := range []string{"embedding.word.weight", "output.weight"} {
		t, ok := out[name]
		if !ok {
			continue
		}
		if t.Dim(0) != info.PaddedVocab {
			return nil, fmt.Errorf("%s has %d rows, the arguments' padded vocabulary is %d", name, t.Dim(0), info.PaddedVocab)
		}
		vp := nn.PaddedVocab(cfg.Vocab, cfg.VocabMultiple, 1)
		out[name] = padRowsTo(t.Narrow(0, 0, cfg.Vocab), vp)
	}
	if err := checkComplete(GPTModel(cfg), out); err != nil {
		return nil, fmt.Errorf("%w%s", err, megatronShapeHint(err, cfg))
	}
	return out, nil
}

// mergeMegatronTensor merges the TP ranks' parts of the Megatron tensor name into out,
// under megago's name(s).
func mergeMegatronTensor(dev *tensor.Device, name string, parts []*torchTensor, cfg nn.GPTConfig, info *MegatronInfo, out map[string]*tensor.Tensor) error {
	mg, split, err := megatronName(name, cfg.Activation == nn.SwiGLU)
	if err != nil {
		return err
	}
	ts := make([]*tensor.Tensor, len(parts))
	for r, p := range parts {
		if p == nil {
			return fmt.Errorf("%s is missing from TP rank %d", name, r)
		}
		if ts[r], err = p.Tensor(dev); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if !ts[r].Shape().Equal(ts[0].Shape()) || ts[r].DType() != ts[0].DType() {
			return fmt.Errorf("%s is %v %v on TP rank %d, %v %v on rank 0", name, ts[r].DType(), ts[r].Shape(), r, ts[0].DType(), ts[0].Shape())
		}
	}
	switch split {
	case tpReplicated:
		if w := replicaDiffers(name, parts); w != "" {
			info.Warnings = append(info.Warnings, w)
		}
		out[mg] = ts[0]
	case tpColumn:
		out[mg] = tensor.Concat(0, ts...)
	case tpRow:
		if ts[0].Rank() != 2 {
			return fmt.Errorf("%s has shape %v, not a matrix", name, ts[0].Shape())
		}
		out[mg] = tensor.Concat(1, ts...)
	case tpGateUp:
		n := ts[0].Dim(0)
		if n%2 != 0 {
			return fmt.Errorf("SwiGLU %s has %d rows per rank, not gate and up halves", name, n)
		}
		gates, ups := make([]*tensor.Tensor, len(ts)), make([]*tensor.Tensor, len(ts))
		for r, t := range ts {
			h := tensor.Split(t, 0, n/2, n/2)
			gates[r], ups[r] = h[0], h[1]
		}
		out[strings.Replace(mg, ".mlp.fc1.", ".mlp.gate.", 1)] = tensor.Concat(0, gates...)
		out[mg] = tensor.Concat(0, ups...)
	}
	return nil
}

// replicaDiffers returns a warning naming the TP ranks whose copy of the replicated
// tensor name differs from rank 0's, or "".
func replicaDiffers(name string, parts []*torchTensor) string {
	var ranks []string
	for r, p := range parts[1:] {
		if !bytes.Equal(p.Data, parts[0].Data) {
			ranks = append(ranks, strconv.Itoa(r+1))
		}
	}
	if len(ranks) == 0 {
		return ""
	}
	return fmt.Sprintf("%s is replicated over TP but differs between ranks: rank(s) %s differ from rank 0, whose copy is used", name, strings.Join(ranks, ", "))
}

// megatronShapeHint explains, for a shape error of checkComplete, which Megatron
// arguments gave the size megago expected.
func megatronShapeHint(err error, c nn.GPTConfig) string {
	c.TransformerConfig = c.TransformerConfig.Defaults()
	msg := err.Error()
	switch {
	case strings.Contains(msg, "attn.qkv."):
		return fmt.Sprintf(" (num_query_groups %d × (num_attention_heads %d / num_query_groups + 2) × kv_channels %d = %d rows; group_query_attention %v)",
			c.KVHeads, c.Heads, c.HeadSize, c.KVHeads*(c.Heads/c.KVHeads+2)*c.HeadSize, c.KVHeads != c.Heads)
	case strings.Contains(msg, "attn.proj."):
		return fmt.Sprintf(" (num_attention_heads %d × kv_channels %d = %d columns)", c.Heads, c.HeadSize, c.Heads*c.HeadSize)
	case strings.Contains(msg, "attn.q_norm.") || strings.Contains(msg, "attn.k_norm."):
		return fmt.Sprintf(" (qk_layernorm normalizes each head: kv_channels %d)", c.HeadSize)
	case strings.Contains(msg, "mlp."):
		return fmt.Sprintf(" (ffn_hidden_size %d, swiglu %v)", c.FFNHidden, c.Activation == nn.SwiGLU)
	}
	return ""
}

// padRowsTo returns t [n, ...] with zero rows appended up to rows.
func padRowsTo(t *tensor.Tensor, rows int) *tensor.Tensor {
	if t.Dim(0) == rows {
		return t
	}
	zeros := tensor.Zeros(t.Device(), t.DType(), append(tensor.Shape{rows - t.Dim(0)}, t.Shape()[1:]...)...)
	return tensor.Concat(0, t, zeros)
}

// checkComplete returns an error unless global holds exactly the parameters of the
// whole model m at TP = 1, with their shapes.
func checkComplete(m Model, global map[string]*tensor.Tensor) error {
	conv, err := m.Converter()
	if err != nil {
		return err
	}
	want := map[string]tensor.Shape{}
	for _, p := range conv.(nn.Module).Params() {
		want[p.Name] = p.GlobalShape
	}
	for _, name := range sortedKeys(want) {
		t, ok := global[name]
		switch {
		case !ok:
			return fmt.Errorf("no tensor for megago's %s", name)
		case !t.Shape().Equal(want[name]):
			return fmt.Errorf("%s has shape %v, megago's model needs %v", name, t.Shape(), want[name])
		}
	}
	for _, name := range sortedKeys(global) {
		if _, ok := want[name]; !ok {
			return fmt.Errorf("%s is not a parameter of megago's model", name)
		}
	}
	return nil
}
