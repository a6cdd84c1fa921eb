package checkpoint

import (
	"fmt"
	"math"

	"megago/nn"
	"megago/tensor"
)

// The tensors of a Megatron-core GPT's state dict, as ExportMegatron writes them, and
// the arguments it records beside them.

// megatronEntry is one tensor of a Megatron-core GPT's whole state dict.
type megatronEntry struct {
	name       string   // Megatron-core's name, layers numbered globally
	layer      int      // the layer, or −1
	sub        string   // the name within the layer (after decoder.layers.N.)
	from       []string // megago's tensor, or the gate and up projections of SwiGLU's fc1
	split      tpSplit
	vocab      bool // dim 0 is the padded vocabulary
	extraState bool // a Transformer Engine module's _extra_state: an empty uint8 tensor
}

// megatronLayout lists the tensors of a Megatron-core GPT of configuration c (after
// Defaults) in the order of its modules: with Transformer Engine's layers (te), the
// norms fused into linear_qkv and linear_fc1 (layer_norm_weight, layer_norm_bias) and an
// _extra_state per Transformer Engine module; else the local layers' input_layernorm and
// pre_mlp_layernorm.
func megatronLayout(c nn.GPTConfig, te bool) []megatronEntry {
	var out []megatronEntry
	top := func(name string, split tpSplit, vocab bool, from string) {
		out = append(out, megatronEntry{name: name, layer: -1, from: []string{from}, split: split, vocab: vocab})
	}
	top("embedding.word_embeddings.weight", tpColumn, true, "embedding.word.weight")
	if c.Position == nn.LearnedPositions {
		top("embedding.position_embeddings.weight", tpReplicated, false, "embedding.position.weight")
	}
	for i := range c.NumLayers {
		out = append(out, megatronLayerLayout(c, i, te)...)
	}
	for _, n := range normParams(c) {
		top("decoder.final_layernorm."+n, tpReplicated, false, "final_norm."+n)
	}
	if c.Untied {
		top("output_layer.weight", tpColumn, true, "output.weight")
	}
	return out
}

// normParams returns the parameters of c's norms: weight, and bias for LayerNorm.
func normParams(c nn.GPTConfig) []string {
	if c.Norm == nn.LayerNormKind {
		return []string{"weight", "bias"}
	}
	return []string{"weight"}
}

// megatronLayerLayout lists the tensors of layer i (see megatronLayout).
func megatronLayerLayout(c nn.GPTConfig, i int, te bool) []megatronEntry {
	var out []megatronEntry
	l := fmt.Sprintf("layers.%d.", i)
	add := func(sub string, split tpSplit, from ...string) {
		for j := range from {
			from[j] = l + from[j]
		}
		out = append(out, megatronEntry{name: fmt.Sprintf("decoder.layers.%d.%s", i, sub), layer: i, sub: sub, from: from,
			split: split, extraState: len(from) == 0})
	}
	norm := func(megatron, megago string) {
		for _, n := range normParams(c) {
			add(megatron+n, tpReplicated, megago+n)
		}
	}
	// linear adds a linear layer (and with te its _extra_state, after the norm fused
	// into it, fusedNorm, if not "").
	linear := func(megatron, megago string, weight, bias tpSplit, withBias bool, fusedNorm string) {
		if te && fusedNorm != "" {
			norm(megatron+".layer_norm_", fusedNorm)
		}
		switch {
		case megago == "mlp.fc1" && c.Activation == nn.SwiGLU: // each rank: its gate rows, its up rows
			add(megatron+".weight", tpGateUp, "mlp.gate.weight", "mlp.fc1.weight")
			if withBias {
				add(megatron+".bias", tpGateUp, "mlp.gate.bias", "mlp.fc1.bias")
			}
		default:
			add(megatron+".weight", weight, megago+".weight")
			if withBias {
				add(megatron+".bias", bias, megago+".bias")
			}
		}
		if te {
			add(megatron+"._extra_state", tpReplicated)
		}
	}
	if te {
		add("self_attention.core_attention._extra_state", tpReplicated)
	} else {
		norm("input_layernorm.", "norm1.")
	}
	linear("self_attention.linear_proj", "attn.proj", tpRow, tpReplicated, c.Bias, "")
	linear("self_attention.linear_qkv", "attn.qkv", tpColumn, tpColumn, c.Bias || c.QKVBias, "norm1.")
	if c.QKNorm {
		norm("self_attention.q_layernorm.", "attn.q_norm.")
		norm("self_attention.k_layernorm.", "attn.k_norm.")
	}
	if !te {
		norm("pre_mlp_layernorm.", "norm2.")
	}
	linear("mlp.linear_fc1", "mlp.fc1", tpColumn, tpColumn, c.Bias, "norm2.")
	linear("mlp.linear_fc2", "mlp.fc2", tpRow, tpReplicated, c.Bias, "")
	return out
}

// megatronExportArgs returns the arguments ExportMegatron records: what Megatron's
// --use-checkpoint-args reads (load_args_from_checkpoint), what it compares when
// resuming (check_checkpoint_args), and what ImportMegatron reads back.
func megatronExportArgs(c nn.GPTConfig, o MegatronExportOptions, dtype tensor.DType, padded int) pickleNamespace {
	tp, pp := o.sizes()
	groups := 1 // Megatron's default when group_query_attention is off
	if c.KVHeads != c.Heads {
		groups = c.KVHeads
	}
	position := map[nn.Position]string{nn.LearnedPositions: "learned_absolute", nn.RoPE: "rope", nn.NoPositions: "none"}[c.Position]
	norm := map[nn.Norm]string{nn.LayerNormKind: "LayerNorm", nn.RMSNormKind: "RMSNorm"}[c.Norm]
	var rotaryBase any = c.RoPETheta
	if c.RoPETheta == math.Trunc(c.RoPETheta) && math.Abs(c.RoPETheta) < 1<<53 {
		rotaryBase = int(c.RoPETheta) // Megatron's --rotary-base is an int
	}
	rotaryPercent := c.RotaryPercent
	if rotaryPercent == 0 {
		rotaryPercent = 1
	}
	ropeFactor := c.RoPEScaling
	if ropeFactor == 0 {
		ropeFactor = 8 // Megatron's default, unused without use_rope_scaling
	}
	var seqLength, tokenizer any
	if c.MaxPosition > 0 {
		seqLength = c.MaxPosition
	}
	if o.TokenizerType != "" {
		tokenizer = o.TokenizerType
	}
	multiple := c.VocabMultiple
	if multiple == 0 {
		multiple = 128
	}
	torchDType := map[tensor.DType]string{tensor.F32: "float32", tensor.BF16: "bfloat16", tensor.F16: "float16", tensor.F64: "float64"}[dtype]
	impl := "transformer_engine"
	if o.Local {
		impl = "local"
	}
	return pickleNamespace{
		{"num_layers", c.NumLayers}, {"hidden_size", c.Hidden}, {"ffn_hidden_size", c.FFNHidden},
		{"num_attention_heads", c.Heads}, {"kv_channels", c.HeadSize},
		{"group_query_attention", c.KVHeads != c.Heads}, {"num_query_groups", groups},
		{"max_position_embeddings", c.MaxPosition}, {"seq_length", seqLength},
		{"position_embedding_type", position}, {"add_position_embedding", true},
		{"rotary_base", rotaryBase}, {"rotary_percent", rotaryPercent}, {"rotary_interleaved", false},
		{"rotary_seq_len_interpolation_factor", nil},
		{"use_rope_scaling", c.RoPEScaling != 0}, {"rope_scaling_factor", ropeFactor},
		{"normalization", norm}, {"norm_epsilon", c.NormEps}, {"apply_layernorm_1p", false},
		{"qk_layernorm", c.QKNorm}, {"swiglu", c.Activation == nn.SwiGLU}, {"squared_relu", false},
		{"openai_gelu", false}, {"bias_gelu_fusion", c.Activation == nn.GeLU},
		{"add_bias_linear", c.Bias}, {"add_qkv_bias", c.Bias || c.QKVBias},
		{"untie_embeddings_and_output_weights", c.Untied},
		{"apply_residual_connection_post_layernorm", false},
		{"hidden_dropout", c.Dropout}, {"attention_dropout", c.AttnDropout}, {"init_method_std", c.InitStd},
		{"make_vocab_size_divisible_by", multiple}, {"padded_vocab_size", padded}, {"vocab_size", c.Vocab},
		{"tokenizer_type", tokenizer},
		{"tensor_model_parallel_size", tp}, {"pipeline_model_parallel_size", pp},
		{"virtual_pipeline_model_parallel_size", nil}, {"expert_model_parallel_size", 1}, {"num_experts", nil},
		{"world_size", tp * pp}, {"data_parallel_size", 1},
		{"params_dtype", pickleGlobal{"torch", torchDType}}, {"fp16", dtype == tensor.F16}, {"bf16", dtype == tensor.BF16},
		{"transformer_impl", impl}, {"ckpt_format", "torch"}, {"use_distributed_optimizer", false},
		{"iteration", o.Iteration}, {"consumed_train_samples", o.ConsumedSamples}, {"consumed_valid_samples", 0},
	}
}

// megatronLoadNotes returns what the Megatron run loading an export must be told, as
// flags it does not take from the checkpoint.
func megatronLoadNotes(c nn.GPTConfig, o MegatronExportOptions) []string {
	notes := []string{"load with --ckpt-format torch (and --use-checkpoint-args to take the model's settings from the checkpoint)"}
	if o.Local {
		notes = append(notes, "written with local layers' names: load with --transformer-impl local")
	} else {
		notes = append(notes, "written with Transformer Engine's names: load with --transformer-impl transformer_engine (Megatron's default)")
	}
	if o.Iteration > 0 {
		notes = append(notes, "the checkpoint holds no optimizer or RNG state: load with --finetune, or --no-load-optim --no-load-rng")
	}
	switch {
	case c.Activation == nn.GeLU:
		notes = append(notes, "the MLP's GeLU is the tanh form, which Megatron-core computes in its bias-GeLU fusion: do not pass --no-bias-gelu-fusion")
	case c.Activation == nn.GeLUErf && c.Bias:
		notes = append(notes, "the MLP's GeLU is the erf form: pass --no-bias-gelu-fusion (Megatron's fused bias-GeLU is the tanh form)")
	}
	return notes
}
