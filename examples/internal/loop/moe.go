package loop

import (
	"context"
	"fmt"

	"megago/examples/internal/report"
	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// Mixture-of-experts logging: after each step every rank hands its MoE layers'
// statistics to one all-reduce over the world, which gives rank 0 the iteration's
// metrics as Megatron's MoEMetricsTracker.report computes them (report.MoE).

// MoELayerStats is one MoE layer's statistics on one rank since the last step
// (nn.MoEStats).
type MoELayerStats = nn.MoELayerStats

// MoELog says what to log of a model's mixture-of-experts layers.
type MoELog struct {
	// Stats returns this rank's statistics since its last call (and resets them):
	// nn.MoEStats over the rank's model chunks.
	Stats func() []MoELayerStats
	// Config is the model's MoE configuration: its experts, its MoE layers, its
	// balancing and their coefficients; NumLayers the model's layers.
	Config    nn.MoEConfig
	NumLayers int
	// PerLayer logs each layer's values too (--moe-per-layer-logging).
	PerLayer bool
}

// moeLoss is one of the losses Megatron tracks: its name, the coefficient it was
// weighted with, and how to read it from a layer's stats.
type moeLoss struct {
	name  string
	coeff float64
	of    func(MoELayerStats) float64
}

// losses returns the losses Megatron's training_log tracks for c: the load-balancing
// loss of the balancing type, and the z-loss with a z-loss coefficient.
func (l *MoELog) losses() []moeLoss {
	c := l.Config
	var ls []moeLoss
	switch c.LoadBalancing {
	case "", "aux_loss":
		ls = append(ls, moeLoss{"load_balancing_loss", c.AuxLossCoeff, func(s MoELayerStats) float64 { return s.AuxLoss }})
	case "seq_aux_loss":
		ls = append(ls, moeLoss{"seq_load_balancing_loss", c.AuxLossCoeff, func(s MoELayerStats) float64 { return s.SeqAuxLoss }})
	case "global_aux_loss":
		ls = append(ls, moeLoss{"global_load_balancing_loss", c.AuxLossCoeff, func(s MoELayerStats) float64 { return s.GlobalAuxLoss }})
	}
	if c.ZLossCoeff > 0 {
		ls = append(ls, moeLoss{"z_loss", c.ZLossCoeff, func(s MoELayerStats) float64 { return s.ZLoss }})
	}
	return ls
}

// moeLayers returns the indices of the MoE layers of a model of n layers.
func moeLayers(c nn.MoEConfig, n int) []int {
	var out []int
	for i := range n {
		if c.IsMoELayer(i, n) {
			out = append(out, i)
		}
	}
	return out
}

// moeShares are a rank's place among the ranks that hold the same layer: tp is the
// tensor-parallel size, dp the data-parallel size times the context-parallel size (the
// ranks beside TP that route other tokens through the same layer).
type moeShares struct{ tp, dp int }

// moeVector returns this rank's part of the world sum that gives the iteration's
// metrics: width = len(losses)+E numbers per layer of the model, zero for the layers
// the rank does not hold. Each loss is divided by its coefficient and its
// micro-batches (Megatron's loss_scale 1/M) and pre-scaled so that the sum over the
// world is Megatron's reduction: summed over the pipeline stages (each layer lives on
// one) and averaged over TP and DP (DP × CP under context parallelism). nn's routers
// record each loss as the value of the whole token group on every rank of it (the TP
// ranks' tokens together; for global_load_balancing_loss the whole global batch's), so
// one TP rank's value is the sum Megatron forms over TP of the parts. Token counts are each rank's own tokens
// (every TP rank routes its part of the sequence, with or without sequence
// parallelism, and every CP rank its chunks): summed over TP, DP, CP and micro-batches,
// the global batch's.
func moeVector(stats []MoELayerStats, losses []moeLoss, experts, layers int, sh moeShares) []float64 {
	width := len(losses) + experts
	v := make([]float64, width*layers)
	share := 1 / float64(sh.tp*sh.dp)
	for _, s := range stats {
		if s.Micro == 0 || s.Layer < 0 || s.Layer >= layers {
			continue
		}
		row := v[s.Layer*width : (s.Layer+1)*width]
		for i, l := range losses {
			if l.coeff == 0 { // Megatron computes no loss without a coefficient: logged as 0
				continue
			}
			row[i] = l.of(s) / l.coeff / float64(s.Micro) * share
		}
		for e, n := range s.TokensPerExpert[:min(len(s.TokensPerExpert), experts)] {
			row[len(losses)+e] = float64(n)
		}
	}
	return v
}

// moeMetrics returns the metrics of the world sum sum of moeVector.
func (l *MoELog) moeMetrics(sum []float64, losses []moeLoss) *report.MoE {
	experts := l.Config.NumExperts
	width := len(losses) + experts
	m := &report.MoE{Layers: moeLayers(l.Config, l.NumLayers), PerLayer: l.PerLayer}
	for i, ls := range losses {
		ml := report.MoELoss{Name: ls.name, Layer: make([]float64, len(m.Layers))}
		for j, layer := range m.Layers {
			ml.Layer[j] = sum[layer*width+i]
		}
		m.Losses = append(m.Losses, ml)
	}
	for _, layer := range m.Layers {
		row := sum[layer*width+len(losses) : (layer+1)*width]
		m.Tokens = append(m.Tokens, append([]float64(nil), row...))
	}
	return m
}

// reduce collects this rank's MoE statistics and returns the iteration's metrics,
// reduced over world (every rank calls it; each gets the result). mesh gives the TP
// and DP sizes.
func (l *MoELog) reduce(ctx context.Context, mesh *parallel.Mesh, dev *tensor.Device) (*report.MoE, error) {
	losses := l.losses()
	sh := moeShares{tp: mesh.TP().Size(), dp: mesh.DPCP().Size()}
	v := moeVector(l.Stats(), losses, l.Config.NumExperts, l.NumLayers, sh)
	t := tensor.FromSlice(dev, v, len(v))
	defer t.Release()
	if err := mesh.World().AllReduce(ctx, t, parallel.Sum); err != nil {
		return nil, fmt.Errorf("mixture-of-experts metrics: %w", err)
	}
	return l.moeMetrics(tensor.ToSlice[float64](t), losses), nil
}
