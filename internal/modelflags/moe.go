package modelflags

import (
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"

	"megago/nn"
)

// MoE holds Megatron's mixture-of-experts flags, named and defaulted as Megatron's
// (megatron/training/arguments.py's _add_moe_args and core's TransformerConfig, whose
// None is 0 or "" here), which Apply maps onto nn.MoEConfig. Without --num-experts the
// model is dense and every other flag must keep its default.
type MoE struct {
	NumExperts       int     // --num-experts E (0: no MoE)
	FFNHiddenSize    int     // --moe-ffn-hidden-size (0: --ffn-hidden-size)
	LayerFreq        string  // --moe-layer-freq: N, or a list expression "([1]*3+[0]*1)*2" (layer_freq.go)
	RouterTopK       int     // --moe-router-topk (2)
	ScoreFunction    string  // --moe-router-score-function softmax|sigmoid
	PreSoftmax       bool    // --moe-router-pre-softmax
	EnableExpertBias bool    // --moe-router-enable-expert-bias
	BiasUpdateRate   float64 // --moe-router-bias-update-rate (1e-3)
	LoadBalancing    string  // --moe-router-load-balancing-type aux_loss|seq_aux_loss|global_aux_loss|none
	AuxLossCoeff     float64 // --moe-aux-loss-coeff (0)
	ZLossCoeff       float64 // --moe-z-loss-coeff (0: none)
	// CapacityFactor is --moe-expert-capacity-factor: 0 or negative (Megatron's None,
	// which Megatron also makes of a negative value) means no capacity: no token dropped.
	CapacityFactor float64
	DropPolicy     string // --moe-token-drop-policy probs|position
	PadToCapacity  bool   // --moe-pad-expert-input-to-capacity
	SharedFFN      int    // --moe-shared-expert-intermediate-size (0: no shared expert)
	SharedGate     bool   // --moe-shared-expert-gate
	GroupedGEMM    bool   // --moe-grouped-gemm
	Dispatcher     string // --moe-token-dispatcher-type allgather|alltoall
	PerLayerLog    bool   // --moe-per-layer-logging
	// EP is --expert-model-parallel-size (1); ETP --expert-tensor-parallel-size (0:
	// the tensor-parallel size, Megatron's default).
	EP, ETP int
}

// MoEDefaults returns Megatron's defaults: no experts.
func MoEDefaults() MoE {
	return MoE{LayerFreq: "1", RouterTopK: 2, ScoreFunction: "softmax", BiasUpdateRate: 1e-3,
		LoadBalancing: "aux_loss", DropPolicy: "probs", Dispatcher: "allgather", EP: 1}
}

// Register registers the flags on fs with m's values as their defaults.
func (m *MoE) Register(fs *flag.FlagSet) {
	fs.IntVar(&m.NumExperts, "num-experts", m.NumExperts, "experts E of each mixture-of-experts layer (0: a dense model)")
	fs.IntVar(&m.FFNHiddenSize, "moe-ffn-hidden-size", m.FFNHiddenSize, "hidden size of each expert (0: --ffn-hidden-size)")
	fs.StringVar(&m.LayerFreq, "moe-layer-freq", m.LayerFreq, `MoE layers: N (layers 0, N, 2N, ...) or a list of 0/1 per layer such as "([1]*3+[0]*1)*2"`)
	fs.IntVar(&m.RouterTopK, "moe-router-topk", m.RouterTopK, "experts each token is routed to (k)")
	fs.StringVar(&m.ScoreFunction, "moe-router-score-function", m.ScoreFunction, "router scores: softmax or sigmoid")
	fs.BoolVar(&m.PreSoftmax, "moe-router-pre-softmax", m.PreSoftmax, "softmax over all experts before choosing the top k (else over the chosen k)")
	fs.BoolVar(&m.EnableExpertBias, "moe-router-enable-expert-bias", m.EnableExpertBias, "aux-loss-free balancing: a per-expert bias on the scores that choose experts, updated after each step")
	fs.Float64Var(&m.BiasUpdateRate, "moe-router-bias-update-rate", m.BiasUpdateRate, "step of the expert bias update (with --moe-router-enable-expert-bias)")
	fs.StringVar(&m.LoadBalancing, "moe-router-load-balancing-type", m.LoadBalancing, "aux_loss (per micro-batch), seq_aux_loss (per sequence), global_aux_loss (over the global batch) or none")
	fs.Float64Var(&m.AuxLossCoeff, "moe-aux-loss-coeff", m.AuxLossCoeff, "weight of the load-balancing loss (1e-2 is a good start)")
	fs.Float64Var(&m.ZLossCoeff, "moe-z-loss-coeff", m.ZLossCoeff, "weight of the router z-loss (0: none; 1e-3 is a good start)")
	fs.Float64Var(&m.CapacityFactor, "moe-expert-capacity-factor", m.CapacityFactor, "each expert takes at most this × tokens·k/E tokens per micro-batch, the rest dropped (0 or negative: no limit)")
	fs.StringVar(&m.DropPolicy, "moe-token-drop-policy", m.DropPolicy, "tokens over capacity to drop: probs (the lowest probabilities) or position (the latest)")
	fs.BoolVar(&m.PadToCapacity, "moe-pad-expert-input-to-capacity", m.PadToCapacity, "pad each expert's input to its capacity (with --moe-expert-capacity-factor)")
	fs.IntVar(&m.SharedFFN, "moe-shared-expert-intermediate-size", m.SharedFFN, "hidden size of a shared expert every token goes through (0: none)")
	fs.BoolVar(&m.SharedGate, "moe-shared-expert-gate", m.SharedGate, "scale the shared expert's output by a learned sigmoid gate (Qwen2-MoE)")
	fs.BoolVar(&m.GroupedGEMM, "moe-grouped-gemm", m.GroupedGEMM, "all local experts in one grouped matrix product per projection (the same results)")
	fs.StringVar(&m.Dispatcher, "moe-token-dispatcher-type", m.Dispatcher, "how tokens reach other expert-parallel ranks' experts: allgather or alltoall")
	fs.BoolVar(&m.PerLayerLog, "moe-per-layer-logging", m.PerLayerLog, "also log the load-balancing losses and expert loads of each MoE layer")
	fs.IntVar(&m.EP, "expert-model-parallel-size", m.EP, "expert-parallel size EP: each rank of an EP group holds E/EP experts")
	fs.IntVar(&m.ETP, "expert-tensor-parallel-size", m.ETP, "tensor-parallel size of each expert (0: --tensor-model-parallel-size)")
}

// moeFlag is one flag of MoE: its name and value as the command line writes it.
type moeFlag struct{ name, value string }

// flags returns every flag of m, in Register's order.
func (m MoE) flags() []moeFlag {
	b, i, f := strconv.FormatBool, strconv.Itoa, func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	return []moeFlag{{"num-experts", i(m.NumExperts)}, {"moe-ffn-hidden-size", i(m.FFNHiddenSize)},
		{"moe-layer-freq", m.LayerFreq}, {"moe-router-topk", i(m.RouterTopK)},
		{"moe-router-score-function", m.ScoreFunction}, {"moe-router-pre-softmax", b(m.PreSoftmax)},
		{"moe-router-enable-expert-bias", b(m.EnableExpertBias)}, {"moe-router-bias-update-rate", f(m.BiasUpdateRate)},
		{"moe-router-load-balancing-type", m.LoadBalancing}, {"moe-aux-loss-coeff", f(m.AuxLossCoeff)},
		{"moe-z-loss-coeff", f(m.ZLossCoeff)}, {"moe-expert-capacity-factor", f(m.CapacityFactor)},
		{"moe-token-drop-policy", m.DropPolicy}, {"moe-pad-expert-input-to-capacity", b(m.PadToCapacity)},
		{"moe-shared-expert-intermediate-size", i(m.SharedFFN)}, {"moe-shared-expert-gate", b(m.SharedGate)},
		{"moe-grouped-gemm", b(m.GroupedGEMM)}, {"moe-token-dispatcher-type", m.Dispatcher},
		{"moe-per-layer-logging", b(m.PerLayerLog)},
		{"expert-model-parallel-size", i(m.EP)}, {"expert-tensor-parallel-size", i(m.ETP)}}
}

// Check returns a message for each flag value that cannot work in a model of layers
// layers whose dense MLP has hidden size ffn, in the flags' words (Megatron's where it
// has them). The parallel sizes are checked against the world by CheckLayout.
func (m MoE) Check(layers, ffn int) []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if m.NumExperts < 0 {
		bad("--num-experts %d must not be negative (0: a dense model)", m.NumExperts)
	}
	if m.NumExperts <= 0 {
		var given []string
		d := MoEDefaults().flags()
		for k, f := range m.flags() {
			// Megatron sets --expert-tensor-parallel-size for every model (to TP).
			if f.name != "num-experts" && f.name != "expert-tensor-parallel-size" && f.value != d[k].value {
				given = append(given, "--"+f.name+" "+f.value)
			}
		}
		if len(given) > 0 {
			bad("%s: mixture-of-experts flags need --num-experts", strings.Join(given, ", "))
		}
		return errs
	}
	errs = append(errs, m.checkRouter()...)
	errs = append(errs, m.checkSizes(layers, ffn)...)
	return errs
}

// checkRouter checks the router's flags: top-k, scores, balancing and capacity.
func (m MoE) checkRouter() []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	oneOf := func(flag, v string, want []string, notImplemented ...string) {
		for _, w := range want {
			if v == w {
				return
			}
		}
		for _, w := range notImplemented {
			if v == w {
				bad("--%s %s is not implemented (%s)", flag, v, strings.Join(want, ", "))
				return
			}
		}
		bad("--%s %q: want %s", flag, v, strings.Join(want, ", "))
	}
	if m.RouterTopK < 1 || m.RouterTopK > m.NumExperts {
		bad("--moe-router-topk %d must be between 1 and --num-experts %d", m.RouterTopK, m.NumExperts)
	}
	oneOf("moe-router-score-function", m.ScoreFunction, []string{"softmax", "sigmoid"}, "sqrtsoftplus")
	if m.RouterTopK == 1 && m.ScoreFunction == "softmax" && !m.PreSoftmax {
		// A softmax over one chosen logit is 1: its gradient would be zero.
		bad("Please use --moe-router-pre-softmax when topk is 1. (--moe-router-topk 1 with --moe-router-score-function softmax)")
	}
	if m.EnableExpertBias && m.ScoreFunction != "sigmoid" {
		bad("--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid (expert bias for aux-loss-free routing only supports sigmoid scores)")
	}
	oneOf("moe-router-load-balancing-type", m.LoadBalancing, []string{"aux_loss", "seq_aux_loss", "global_aux_loss", "none"},
		"sinkhorn", "quantile_balancing")
	oneOf("moe-token-drop-policy", m.DropPolicy, []string{"probs", "position"})
	oneOf("moe-token-dispatcher-type", m.Dispatcher, []string{"allgather", "alltoall"}, "flex")
	for _, v := range []struct {
		name string
		v    float64
	}{{"moe-router-bias-update-rate", m.BiasUpdateRate}, {"moe-aux-loss-coeff", m.AuxLossCoeff}, {"moe-z-loss-coeff", m.ZLossCoeff}} {
		if !(v.v >= 0) || math.IsInf(v.v, 0) {
			bad("--%s %v must be a finite number ≥ 0", v.name, v.v)
		}
	}
	if math.IsNaN(m.CapacityFactor) || math.IsInf(m.CapacityFactor, 0) {
		bad("--moe-expert-capacity-factor %v must be finite (0 or negative: no capacity)", m.CapacityFactor)
	}
	if m.PadToCapacity && !(m.CapacityFactor > 0) {
		bad("--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor (moe_expert_capacity_factor must be set to use moe_pad_expert_input_to_capacity)")
	}
	return errs
}

// checkSizes checks the sizes: the layer pattern, the experts' hidden sizes and the
// expert-parallel split of the experts.
func (m MoE) checkSizes(layers, ffn int) []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if _, pattern, err := parseLayerFreq(m.LayerFreq); err != nil {
		bad("%v", err)
	} else if pattern != nil && len(pattern) != layers {
		bad("--moe-layer-freq %q has %d layers, --num-layers %d (the pattern length must match the total number of transformer layers)", m.LayerFreq, len(pattern), layers)
	} else if pattern != nil && !strings.Contains(patternString(pattern), "1") {
		bad("--moe-layer-freq %q has no MoE layer: drop --num-experts for a dense model", m.LayerFreq)
	}
	if m.FFNHiddenSize < 0 || m.SharedFFN < 0 {
		bad("--moe-ffn-hidden-size %d and --moe-shared-expert-intermediate-size %d must not be negative", m.FFNHiddenSize, m.SharedFFN)
	}
	if m.SharedGate && m.SharedFFN == 0 {
		bad("--moe-shared-expert-gate needs --moe-shared-expert-intermediate-size (a shared expert to gate)")
	}
	if m.EP < 1 || m.ETP < 0 {
		bad("--expert-model-parallel-size %d must be at least 1 and --expert-tensor-parallel-size %d not negative", m.EP, m.ETP)
	} else if m.NumExperts%m.EP != 0 {
		bad("--num-experts %d is not divisible by --expert-model-parallel-size %d (Number of experts should be a multiple of expert model parallel_size.)", m.NumExperts, m.EP)
	}
	if f := m.expertFFN(ffn); m.ETP > 0 && f > 0 && f%m.ETP != 0 {
		bad("the expert hidden size %d (--moe-ffn-hidden-size, default --ffn-hidden-size) is not divisible by --expert-tensor-parallel-size %d", f, m.ETP)
	}
	return errs
}

// expertFFN returns each expert's hidden size given the dense MLP's.
func (m MoE) expertFFN(ffn int) int {
	if m.FFNHiddenSize > 0 {
		return m.FFNHiddenSize
	}
	return ffn
}

// CheckLayout returns a message for each expert-parallel size that does not fit a
// world of world ranks at tensor-parallel size tp and pipeline-parallel size pp, with
// a dense MLP of hidden size ffn: Megatron's second decomposition of the same ranks,
// world = ETP × EP × expert-DP × PP, needs ETP·EP to divide world/PP (= TP × CP × DP).
func (m MoE) CheckLayout(world, tp, pp, ffn int) []string {
	if m.NumExperts <= 0 || m.EP < 1 || m.ETP < 0 || tp < 1 || pp < 1 {
		return nil // refused by Check, or by the dense layout's checks
	}
	etp := m.ETP
	if etp == 0 {
		etp = tp
	}
	if f := m.expertFFN(ffn); m.ETP == 0 && f > 0 && f%etp != 0 {
		return []string{fmt.Sprintf("the expert hidden size %d (--moe-ffn-hidden-size, default --ffn-hidden-size) is not divisible by the expert-tensor-parallel size %d (--expert-tensor-parallel-size, default --tensor-model-parallel-size)", f, etp)}
	}
	if (world/pp)%(etp*m.EP) != 0 {
		return []string{fmt.Sprintf("expert-tensor-parallel size %d × --expert-model-parallel-size %d does not divide the %d ranks of each pipeline stage (%d ranks / PP %d): the experts' layout is ETP × EP × expert-DP × PP over the same ranks",
			etp, m.EP, world/pp, world, pp)}
	}
	return nil
}

// ExpertDP returns the expert-data-parallel size: world / (ETP·EP·PP), ETP 0 meaning
// tp. Call it after CheckLayout.
func (m MoE) ExpertDP(world, tp, pp int) int {
	etp := m.ETP
	if etp == 0 {
		etp = tp
	}
	return world / (etp * max(m.EP, 1) * pp)
}

// Apply sets c.MoE from the flags (nothing without --num-experts). Call Check first.
func (m MoE) Apply(c *nn.TransformerConfig) {
	if m.NumExperts <= 0 {
		c.MoE = nn.MoEConfig{}
		return
	}
	freq, pattern, _ := parseLayerFreq(m.LayerFreq)
	e := nn.MoEConfig{NumExperts: m.NumExperts, FFNHidden: m.FFNHiddenSize, TopK: m.RouterTopK,
		PreSoftmax: m.PreSoftmax, EnableExpertBias: m.EnableExpertBias,
		AuxLossCoeff: m.AuxLossCoeff, ZLossCoeff: m.ZLossCoeff, PadToCapacity: m.PadToCapacity,
		SharedExpertFFNHidden: m.SharedFFN, SharedExpertGate: m.SharedGate, GroupedGEMM: m.GroupedGEMM,
		EP: m.EP, ETP: m.ETP}
	// Megatron's defaults are nn's zero values, which keep configurations comparable.
	if pattern != nil {
		e.LayerPattern = patternString(pattern)
	} else if freq > 1 {
		e.LayerFreq = freq
	}
	if m.ScoreFunction != "softmax" {
		e.ScoreFunction = m.ScoreFunction
	}
	if m.EnableExpertBias {
		e.BiasUpdateRate = m.BiasUpdateRate
	}
	if m.LoadBalancing != "aux_loss" {
		e.LoadBalancing = m.LoadBalancing
	}
	if m.CapacityFactor > 0 {
		e.CapacityFactor = m.CapacityFactor
		if m.DropPolicy != "probs" {
			e.DropPolicy = m.DropPolicy
		}
	}
	if m.Dispatcher != "allgather" {
		e.Dispatcher = m.Dispatcher
	}
	c.MoE = e
}

// MoEModelFlags are the flags that describe a mixture-of-experts model's weights and
// routing, which --use-checkpoint-args takes from a checkpoint (MoEFromConfig); the
// others (balancing, capacity, dispatch, parallel sizes, logging) are the run's.
var MoEModelFlags = []string{"num-experts", "moe-ffn-hidden-size", "moe-layer-freq", "moe-router-topk",
	"moe-router-score-function", "moe-router-pre-softmax", "moe-router-enable-expert-bias",
	"moe-shared-expert-intermediate-size", "moe-shared-expert-gate"}

// MoEFromConfig returns m with the flags of MoEModelFlags set to describe c: Apply's
// inverse for them.
func MoEFromConfig(c nn.MoEConfig, m MoE) MoE {
	d := MoEDefaults()
	m.NumExperts, m.FFNHiddenSize = c.NumExperts, c.FFNHidden
	m.LayerFreq = d.LayerFreq
	switch {
	case c.LayerPattern != "":
		m.LayerFreq = "[" + c.LayerPattern + "]"
	case c.LayerFreq > 1:
		m.LayerFreq = strconv.Itoa(c.LayerFreq)
	}
	m.RouterTopK = c.TopK
	if c.TopK == 0 {
		m.RouterTopK = d.RouterTopK
	}
	m.ScoreFunction = c.ScoreFunction
	if c.ScoreFunction == "" {
		m.ScoreFunction = d.ScoreFunction
	}
	m.PreSoftmax, m.EnableExpertBias = c.PreSoftmax, c.EnableExpertBias
	m.SharedFFN, m.SharedGate = c.SharedExpertFFNHidden, c.SharedExpertGate
	return m
}

// Describe returns the experts in a few words ("8 experts, top-2, every 2nd layer,
// expert hidden 256, shared expert 512 (gated), aux_loss 0.01, z-loss 0.001, capacity
// 1.25 (drop by probs), grouped GEMM"), or "" for a dense model; the parallel sizes
// are the layout's.
func (m MoE) Describe() string {
	if m.NumExperts <= 0 {
		return ""
	}
	w := []string{fmt.Sprintf("%d experts, top-%d", m.NumExperts, m.RouterTopK)}
	add := func(on bool, format string, args ...any) {
		if on {
			w = append(w, fmt.Sprintf(format, args...))
		}
	}
	freq, pattern, _ := parseLayerFreq(m.LayerFreq)
	add(pattern != nil, "MoE layers %s", patternString(pattern))
	add(freq > 1, "MoE every %d layers", freq)
	add(m.FFNHiddenSize > 0, "expert hidden %d", m.FFNHiddenSize)
	add(m.ScoreFunction != "softmax", "%s scores", m.ScoreFunction)
	add(m.PreSoftmax, "pre-softmax")
	add(m.EnableExpertBias, "expert bias (rate %g)", m.BiasUpdateRate)
	add(m.SharedFFN > 0 && !m.SharedGate, "shared expert %d", m.SharedFFN)
	add(m.SharedFFN > 0 && m.SharedGate, "gated shared expert %d", m.SharedFFN)
	add(m.LoadBalancing != "none", "%s %g", m.LoadBalancing, m.AuxLossCoeff)
	add(m.ZLossCoeff > 0, "z-loss %g", m.ZLossCoeff)
	add(m.CapacityFactor > 0, "capacity %g (drop by %s%s)", m.CapacityFactor, m.DropPolicy, map[bool]string{true: ", padded"}[m.PadToCapacity])
	add(m.GroupedGEMM, "grouped GEMM")
	return strings.Join(w, ", ")
}
