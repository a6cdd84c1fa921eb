package loop

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// TestMoELayers: the MoE layers of a pattern and of a frequency, as Megatron's
// moe_layer_pattern lists them.
func TestMoELayers(t *testing.T) {
	for _, tc := range []struct {
		c    nn.MoEConfig
		n    int
		want []int
	}{
		{nn.MoEConfig{NumExperts: 2}, 3, []int{0, 1, 2}},
		{nn.MoEConfig{NumExperts: 2, LayerFreq: 2}, 5, []int{0, 2, 4}},
		{nn.MoEConfig{NumExperts: 2, LayerPattern: "0,1,1,0"}, 4, []int{1, 2}},
	} {
		assert.Equal(t, tc.want, moeLayers(tc.c, tc.n), "%+v", tc.c)
	}
}

// TestMoEReduce: on 8 goroutine ranks (TP 2 × PP 2 × DP 2, 4 layers, MoE every 2nd, so
// one MoE layer per stage), rank 0 gets each loss and token count as a slow sum over
// the ranks' coordinates computes it: per layer, each loss divided by its coefficient
// and micro-batches and averaged over TP (each TP rank holds its token group's whole
// value, nn's routers' rule) and DP; token counts summed over TP and DP (each rank
// counts its own tokens).
func TestMoEReduce(t *testing.T) {
	const tp, pp, dp, layers, experts, micro = 2, 2, 2, 4, 3, 2
	for _, tc := range []struct {
		name    string
		cfg     nn.MoEConfig
		want    []string
		perRank func(s *MoELayerStats, v float64)
	}{
		{"aux loss", nn.MoEConfig{NumExperts: experts, LayerFreq: 2, AuxLossCoeff: 0.01, ZLossCoeff: 0.001},
			[]string{"load_balancing_loss", "z_loss"},
			func(s *MoELayerStats, v float64) { s.AuxLoss, s.ZLoss = 0.01*v, 0.001*v }},
		{"global aux loss", nn.MoEConfig{NumExperts: experts, LayerFreq: 2, LoadBalancing: "global_aux_loss", AuxLossCoeff: 0.5},
			[]string{"global_load_balancing_loss"},
			func(s *MoELayerStats, v float64) { s.GlobalAuxLoss = 0.5 * v }},
		{"seq aux loss", nn.MoEConfig{NumExperts: experts, LayerFreq: 2, LoadBalancing: "seq_aux_loss", AuxLossCoeff: 0.1},
			[]string{"seq_load_balancing_loss"},
			func(s *MoELayerStats, v float64) { s.SeqAuxLoss = 0.1 * v }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// value is a rank's per-micro-batch loss (without coefficient) on a layer,
			// the same on the TP ranks of a token group; count its tokens for an expert.
			value := func(layer, dpr int) float64 { return 0.25*float64(layer+1) + 0.0625*float64(dpr) }
			count := func(layer, tpr, dpr, e int) int64 { return int64(100*layer + 10*tpr + 3*dpr + e) }
			log := &MoELog{Config: tc.cfg, NumLayers: layers}
			var got [][]float64
			err := parallel.RunLocal(tp*pp*dp, func(world parallel.Comm) error {
				mesh, err := parallel.NewMesh(context.Background(), world, parallel.Sizes{TP: tp, PP: pp})
				if err != nil {
					return err
				}
				c := mesh.Coord()
				layer := 2 * c.PP // this stage's MoE layer
				s := MoELayerStats{Layer: layer, Micro: micro}
				tc.perRank(&s, micro*value(layer, c.DP))
				for e := range experts {
					s.TokensPerExpert = append(s.TokensPerExpert, count(layer, c.TP, c.DP, e))
				}
				l := *log
				l.Stats = func() []MoELayerStats { return []MoELayerStats{s} }
				m, err := l.reduce(context.Background(), mesh, tensor.NewCPU())
				if err != nil {
					return err
				}
				if world.Rank() == 0 {
					assert.Equal(t, []int{0, 2}, m.Layers)
					for _, loss := range m.Losses {
						got = append(got, loss.Layer)
					}
					for i, name := range tc.want {
						if assert.Less(t, i, len(m.Losses)) {
							assert.Equal(t, name, m.Losses[i].Name)
						}
					}
					got = append(got, m.Tokens...)
				}
				return nil
			})
			require.NoError(t, err)

			var want [][]float64
			for range tc.want {
				row := []float64{}
				for _, layer := range []int{0, 2} {
					sum := 0.0
					for dpr := range dp {
						sum += value(layer, dpr)
					}
					row = append(row, sum/dp)
				}
				want = append(want, row)
			}
			for _, layer := range []int{0, 2} {
				row := make([]float64, experts)
				for e := range experts {
					for dpr := range dp {
						for tpr := range tp {
							row[e] += float64(count(layer, tpr, dpr, e))
						}
					}
				}
				want = append(want, row)
			}
			require.Len(t, got, len(want))
			for i := range want {
				assert.InDeltaSlice(t, want[i], got[i], 1e-12, fmt.Sprint("row ", i)) // pre-scaling by 1/TP, 1/DP rounds
			}
		})
	}
}
