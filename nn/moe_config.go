package nn

import "megago/parallel"

// MoEConfig configures the mixture-of-experts layers of a transformer, as Megatron-core's
// --num-experts family of flags does. The zero value (NumExperts 0) means no MoE: every
// layer has the dense MLP. Zero fields mean the documented defaults (Defaults).
type MoEConfig struct {
	// NumExperts is E, the number of routed experts (--num-experts); 0 means no MoE.
	NumExperts int
	// LayerPattern says which layers have an MoE block instead of the dense MLP: one
	// comma-separated 0 or 1 per layer, 1 for MoE ("1,0,1,0"; --moe-layer-freq given as
	// a list, which the command line expands into this form); "" means every
	// LayerFreq-th layer starting with layer 0 (--moe-layer-freq N; 0 means 1: all). A
	// string keeps the configuration comparable with ==.
	LayerPattern string `json:",omitempty"`
	LayerFreq    int    `json:",omitempty"`
	// FFNHidden is each expert's hidden size (--moe-ffn-hidden-size); 0 means the dense
	// FFNHidden.
	FFNHidden int
	// TopK is the number of experts each token is routed to (--moe-router-topk); 0
	// means 2.
	TopK int
	// ScoreFunction is "softmax" (the default, "" too) or "sigmoid"
	// (--moe-router-score-function).
	ScoreFunction string `json:",omitempty"`
	// PreSoftmax applies the softmax over all E experts before choosing the top k
	// (--moe-router-pre-softmax; Qwen2-MoE's norm_topk_prob false); without it the top k
	// logits are chosen first and the softmax is over them (Mixtral).
	PreSoftmax bool `json:",omitempty"`
	// EnableExpertBias adds a per-expert bias to the scores used for choosing experts
	// (not to the probabilities), updated after each step by BiasUpdateRate times the
	// sign of (mean load − expert load): aux-loss-free balancing
	// (--moe-router-enable-expert-bias, --moe-router-bias-update-rate, default 1e-3).
	EnableExpertBias bool    `json:",omitempty"`
	BiasUpdateRate   float64 `json:",omitempty"`
	// LoadBalancing is "aux_loss" (the default, "" too), "seq_aux_loss",
	// "global_aux_loss" or "none" (--moe-router-load-balancing-type), weighted by
	// AuxLossCoeff (--moe-aux-loss-coeff, default 0).
	LoadBalancing string  `json:",omitempty"`
	AuxLossCoeff  float64 `json:",omitempty"`
	// ZLossCoeff weights the router z-loss (--moe-z-loss-coeff); 0 means none.
	ZLossCoeff float64 `json:",omitempty"`
	// CapacityFactor limits each expert to CapacityFactor·tokens·TopK/E tokens per
	// micro-batch (--moe-expert-capacity-factor); 0 means no limit (dropless). Tokens over
	// capacity are dropped by DropPolicy, "probs" (the default, "" too: keep the highest
	// probabilities) or "position" (keep the earliest tokens) (--moe-token-drop-policy);
	// PadToCapacity pads every expert's input to its capacity
	// (--moe-pad-expert-input-to-capacity).
	CapacityFactor float64 `json:",omitempty"`
	DropPolicy     string  `json:",omitempty"`
	PadToCapacity  bool    `json:",omitempty"`
	// SharedExpertFFNHidden, if not 0, adds a shared expert (a dense MLP of that hidden
	// size every token goes through, --moe-shared-expert-intermediate-size);
	// SharedExpertGate scales its output by sigmoid(x·w), w [1, C] (Qwen2-MoE,
	// --moe-shared-expert-gate).
	SharedExpertFFNHidden int  `json:",omitempty"`
	SharedExpertGate      bool `json:",omitempty"`
	// GroupedGEMM runs all local experts in one grouped matrix product per projection
	// (--moe-grouped-gemm); without it each expert is its own product, as Megatron's
	// SequentialMLP. Results are the same bit for bit.
	GroupedGEMM bool `json:",omitempty"`
	// Dispatcher is how tokens reach the experts of other EP ranks: "allgather" (the
	// default, "" too) or "alltoall" (--moe-token-dispatcher-type).
	Dispatcher string `json:",omitempty"`
	// EP is the expert-parallel size the model will run at
	// (--expert-model-parallel-size), ETP the expert-tensor-parallel size
	// (--expert-tensor-parallel-size; 0 means the dense TP). 0 means 1.
	EP, ETP int `json:",omitempty"`
}

// ExpertGroups are the communicators of a mixture-of-experts layer (see parallel.Mesh):
// nil fields mean a group of one rank.
type ExpertGroups struct {
	// EP is the expert-parallel group: rank r holds experts [r·E/EP, (r+1)·E/EP).
	EP parallel.Comm
	// TP is the expert-tensor-parallel group, which splits each expert's hidden size.
	TP parallel.Comm
	// TPEP is the group over both (expert-TP fastest), over which the allgather
	// dispatcher gathers tokens.
	TPEP parallel.Comm
}
