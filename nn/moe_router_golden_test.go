package nn

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"megago/parallel"
	"megago/tensor"

	"github.com/stretchr/testify/require"
)

// routerGoldenCase is one case of testdata/moe_router/golden.json (see gen.py there).
type routerGoldenCase struct {
	Name   string
	Config struct {
		B, T, C, E, Topk int
		Score, LB, Drop  string
		PreSoftmax       bool `json:"pre_softmax"`
		Bias, Pad        bool
		AuxCoeff         float64 `json:"aux_coeff"`
		ZCoeff           float64 `json:"z_coeff"`
		Capacity, Rate   float64
		LossScale        float64 `json:"loss_scale"`
	}
	Micro                     int
	Weight                    []float32
	ExpertBias                []float32 `json:"expert_bias"`
	X, Dy, Probs, Dx, Dweight []float32
	Map                       []int
	Logged                    struct {
		Aux       float64
		SeqAux    float64 `json:"seq_aux"`
		GlobalAux float64 `json:"global_aux"`
		Z         float64
	}
	TokensPerExpert   []int64   `json:"tokens_per_expert"`
	ExpertBiasUpdated []float32 `json:"expert_bias_updated"`
}

// moeConfig returns the MoEConfig the case describes.
func (g routerGoldenCase) moeConfig() MoEConfig {
	c := g.Config
	return MoEConfig{NumExperts: c.E, TopK: c.Topk, ScoreFunction: c.Score, PreSoftmax: c.PreSoftmax,
		EnableExpertBias: c.Bias, BiasUpdateRate: c.Rate, LoadBalancing: c.LB, AuxLossCoeff: c.AuxCoeff,
		ZLossCoeff: c.ZCoeff, CapacityFactor: c.Capacity, DropPolicy: c.Drop, PadToCapacity: c.Pad}
}

func loadRouterGolden(t *testing.T) []routerGoldenCase {
	t.Helper()
	raw, err := os.ReadFile("testdata/moe_router/golden.json")
	require.NoError(t, err)
	var f struct{ Cases []routerGoldenCase }
	require.NoError(t, json.Unmarshal(raw, &f))
	require.NotEmpty(t, f.Cases)
	return f.Cases
}

// TestRouterGolden checks the router against gen.py's PyTorch transcription of
// Megatron-core's TopKRouter: probabilities, routing map (capacity dropping and padding
// included), the logged losses, the gradients of x and the weight for a random upstream
// gradient (auxiliary losses attached as MoEAuxLossAutoScaler does), tokens per expert
// and the expert bias update.
func TestRouterGolden(t *testing.T) {
	for _, g := range loadRouterGolden(t) {
		t.Run(g.Name, func(t *testing.T) {
			c := g.Config
			dev := tensor.NewCPU()
			b := &Builder{Dev: dev, DType: tensor.F32, RNG: tensor.NewRNG(1), TP: parallel.Self()}
			r := NewRouter(b, "router", TransformerConfig{Hidden: c.C, MoE: g.moeConfig()})
			r.Weight.Tensor.CopyFrom(tensor.FromSlice(dev, g.Weight, c.E, c.C))
			if g.ExpertBias != nil {
				r.ExpertBias.CopyFrom(tensor.FromSlice(dev, g.ExpertBias, c.E))
			}
			n, x0 := c.B*c.T, c.B*c.T*c.C
			for m := range g.Micro {
				x := tensor.FromSlice(dev, g.X[m*x0:(m+1)*x0], c.B, c.T, c.C).SetRequiresGrad(true)
				p := &Pass{Ctx: context.Background(), Train: true, LossScale: c.LossScale, SampleOffset: m * c.B}
				rt := r.Route(p, x)
				requireClose(t, "probs", tensor.ToSlice[float64](rt.Probs), g.Probs[m*n*c.E:(m+1)*n*c.E])
				for i, v := range rt.Map {
					if v != (g.Map[m*n*c.E+i] == 1) {
						t.Fatalf("micro %d: map[token %d, expert %d] = %v, want %v", m, i/c.E, i%c.E, v, !v)
					}
				}
				dy := tensor.FromSlice(dev, g.Dy[m*n*c.E:(m+1)*n*c.E], n, c.E)
				tensor.Sum(tensor.Mul(rt.Probs, dy)).Backward()
				requireCloseTol(t, "dx", tensor.ToSlice[float64](x.Grad()), g.Dx[m*x0:(m+1)*x0], goldenRtol, 1e-5)
			}
			requireCloseTol(t, "dweight", tensor.ToSlice[float64](r.Weight.Grad()), g.Dweight, goldenRtol, 1e-5)
			s := r.TakeStats()
			require.Equal(t, g.Micro, s.Micro)
			require.Equal(t, g.TokensPerExpert, s.TokensPerExpert)
			for _, l := range []struct {
				name      string
				got, want float64
			}{{"aux", s.AuxLoss, g.Logged.Aux}, {"seq aux", s.SeqAuxLoss, g.Logged.SeqAux},
				{"global aux", s.GlobalAuxLoss, g.Logged.GlobalAux}, {"z", s.ZLoss, g.Logged.Z}} {
				require.InDelta(t, l.want, l.got, 1e-6*(1+l.want), l.name) // fp32 sums in PyTorch
			}
			require.Zero(t, r.TakeStats().Micro, "TakeStats resets")
			if g.ExpertBiasUpdated != nil {
				require.NoError(t, UpdateExpertBias(context.Background(), parallel.Self(), r))
				requireClose(t, "expert bias", tensor.ToSlice[float64](r.ExpertBias), g.ExpertBiasUpdated)
			}
		})
	}
}
