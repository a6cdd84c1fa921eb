package report

import (
	"fmt"
	"math"
	"strings"
)

// MoE is one iteration's mixture-of-experts metrics, reduced over every rank (package
// loop reduces them as Megatron's MoEMetricsTracker.report does): its load-balancing
// and z losses, and the tokens each expert received.
//
// A loss is written under Megatron's name (load_balancing_loss, seq_load_balancing_loss,
// global_load_balancing_loss, z_loss), averaged over the MoE layers, to the progress
// line, metrics.jsonl and TensorBoard; with PerLayer also each layer's, as
// "moe/NAME_layer_I" (I the layer's 0-based index in the whole model), as Megatron's
// --moe-per-layer-logging.
//
// The expert load is the tokens-per-expert spread: with c[l][e] the tokens routed to
// expert e of MoE layer l over the iteration's global batch (every micro-batch and
// data-parallel rank, before capacity dropping), tokens_per_expert_min and
// tokens_per_expert_max are the least and most of c over every MoE layer and expert,
// and tokens_per_expert_mean their mean, which is the global batch's tokens × top-k /
// E: a balanced router has min = max = mean. With PerLayer, each layer's min and max
// are written too ("moe/tokens_per_expert_min_layer_I"), and metrics.jsonl holds each
// layer's counts ("moe/tokens_per_expert_layer_I": [c0, c1, ...]). The progress line
// shows them averaged over the iterations since the last line (the mean count of each
// expert, then their min and max).
type MoE struct {
	// Losses are the losses Megatron tracks for the run's flags, each per MoE layer.
	Losses []MoELoss
	// Layers are the MoE layers' indices in the whole model, 0-based, ascending.
	Layers []int
	// Tokens are c: Tokens[i][e] for layer Layers[i] and expert e.
	Tokens [][]float64
	// PerLayer logs each layer's values too (--moe-per-layer-logging).
	PerLayer bool
}

// MoELoss is one of the losses of the MoE layers: Megatron's name and its value on each
// MoE layer (of MoE.Layers), the loss without its coefficient, averaged over the
// micro-batches and the data-parallel ranks.
type MoELoss struct {
	Name  string
	Layer []float64
}

// Mean returns the loss averaged over the MoE layers: what Megatron logs under its
// name.
func (l MoELoss) Mean() float64 {
	s := 0.0
	for _, v := range l.Layer {
		s += v
	}
	return s / float64(len(l.Layer))
}

// spread returns the least, the most and the mean of the counts of tokens.
func spread(tokens ...[]float64) (lo, hi, mean float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	n := 0
	for _, layer := range tokens {
		for _, c := range layer {
			lo, hi, mean = math.Min(lo, c), math.Max(hi, c), mean+c
			n++
		}
	}
	if n == 0 {
		return 0, 0, 0
	}
	return lo, hi, mean / float64(n)
}

// scalars returns the named values of m that metrics.jsonl and TensorBoard both
// receive, in order.
func (m *MoE) scalars() []Field {
	var fs []Field
	for _, l := range m.Losses {
		fs = append(fs, Field{l.Name, l.Mean()})
	}
	lo, hi, mean := spread(m.Tokens...)
	fs = append(fs, Field{"tokens_per_expert_min", lo}, Field{"tokens_per_expert_max", hi}, Field{"tokens_per_expert_mean", mean})
	if !m.PerLayer {
		return fs
	}
	for i, layer := range m.Layers {
		for _, l := range m.Losses {
			fs = append(fs, Field{fmt.Sprintf("moe/%s_layer_%d", l.Name, layer), l.Layer[i]})
		}
		lo, hi, _ := spread(m.Tokens[i])
		fs = append(fs, Field{fmt.Sprintf("moe/tokens_per_expert_min_layer_%d", layer), lo},
			Field{fmt.Sprintf("moe/tokens_per_expert_max_layer_%d", layer), hi})
	}
	return fs
}

// record returns the fields of m in metrics.jsonl: scalars, and with PerLayer each
// layer's counts.
func (m *MoE) record() []Field {
	fs := m.scalars()
	if m.PerLayer {
		for i, layer := range m.Layers {
			fs = append(fs, Field{fmt.Sprintf("moe/tokens_per_expert_layer_%d", layer), m.Tokens[i]})
		}
	}
	return fs
}

// moeWindow sums the MoE metrics of the iterations since the last progress line.
type moeWindow struct {
	sum   *MoE // per-layer losses and counts summed over iters
	iters int
}

// add adds one iteration's metrics.
func (w *moeWindow) add(m *MoE) {
	if m == nil {
		return
	}
	if w.sum == nil {
		w.sum = &MoE{Layers: m.Layers, PerLayer: m.PerLayer, Losses: make([]MoELoss, len(m.Losses)), Tokens: make([][]float64, len(m.Tokens))}
		for i, l := range m.Losses {
			w.sum.Losses[i] = MoELoss{Name: l.Name, Layer: make([]float64, len(l.Layer))}
		}
		for i, c := range m.Tokens {
			w.sum.Tokens[i] = make([]float64, len(c))
		}
	}
	for i, l := range m.Losses {
		addTo(w.sum.Losses[i].Layer, l.Layer)
	}
	for i, c := range m.Tokens {
		addTo(w.sum.Tokens[i], c)
	}
	w.iters++
}

func addTo(dst, src []float64) {
	for i, v := range src {
		dst[i] += v
	}
}

// mean returns the window's metrics averaged over its iterations, nil if none.
func (w *moeWindow) mean() *MoE {
	if w.sum == nil {
		return nil
	}
	m := w.sum
	scale := 1 / float64(w.iters)
	for _, l := range m.Losses {
		for i := range l.Layer {
			l.Layer[i] *= scale
		}
	}
	for _, c := range m.Tokens {
		for e := range c {
			c[e] *= scale
		}
	}
	*w = moeWindow{}
	return m
}

// progress returns what the progress line shows of m ("" for nil): " | load_balancing_loss
// 1.0213 | z_loss 3.1416 | tokens/expert min 112 max 290 mean 192", and with PerLayer one
// more line per MoE layer.
func (m *MoE) progress() (line, layers string) {
	if m == nil {
		return "", ""
	}
	var b strings.Builder
	for _, l := range m.Losses {
		fmt.Fprintf(&b, " | %s %.4f", l.Name, l.Mean())
	}
	lo, hi, mean := spread(m.Tokens...)
	fmt.Fprintf(&b, " | tokens/expert min %s max %s mean %s", Thousands(lo), Thousands(hi), Thousands(mean))
	if !m.PerLayer {
		return b.String(), ""
	}
	var p strings.Builder
	for i, layer := range m.Layers {
		fmt.Fprintf(&p, "  moe layer %d", layer)
		for _, l := range m.Losses {
			fmt.Fprintf(&p, " | %s %.4f", l.Name, l.Layer[i])
		}
		lo, hi, _ := spread(m.Tokens[i])
		fmt.Fprintf(&p, " | tokens/expert min %s max %s\n", Thousands(lo), Thousands(hi))
	}
	return b.String(), p.String()
}
