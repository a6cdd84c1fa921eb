package nn_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/checkpoint"
	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// Tolerance of the MoE golden tests: |got − want| ≤ moeRtol·|want| + moeScale·max|want|,
// want being gen.py's float64 result from the same float32 inputs. An element that is
// the sum of O(max) terms (an output, a gradient) can be off by a few fp32 ulps of the
// largest term, hence the second part; gen.py checks that PyTorch in float32 stays
// within a tenth of this tolerance.
const moeRtol, moeScale = 1e-5, 1e-5

// moeGoldenPrefix is where the layer's parameters live in the model (its name).
const moeGoldenPrefix = "layers.0.mlp"

// A Mixtral-style and a Qwen2-MoE-style layer (shared expert with its sigmoid gate),
// built from the configuration below and the weights PyTorch used
// (testdata/moe/gen.py), must give PyTorch's output, routing (probabilities, chosen
// experts, tokens per expert), load-balancing and z losses, and every gradient of
// Σ y·dy + aux_loss + z_loss.
func TestMoEGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		moe  nn.MoEConfig // must equal the file's megago_moe_config
	}{
		{"mixtral", nn.MoEConfig{NumExperts: 8, TopK: 2, FFNHidden: 24, ScoreFunction: "softmax",
			LoadBalancing: "aux_loss", AuxLossCoeff: 0.01, ZLossCoeff: 0.001}},
		{"qwen2_moe", nn.MoEConfig{NumExperts: 6, TopK: 2, FFNHidden: 24, ScoreFunction: "softmax",
			PreSoftmax: true, LoadBalancing: "aux_loss", AuxLossCoeff: 0.01, ZLossCoeff: 0.001,
			SharedExpertFFNHidden: 32, SharedExpertGate: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := loadMoEGolden(t, "testdata/moe/"+tc.name+".safetensors", tc.moe)
			m, b := g.build(t)

			// Σ y·dy + losses: output, input gradient, every parameter gradient, stats.
			x := g.input(b.Dev)
			p := &nn.Pass{Ctx: context.Background(), Train: true, RNG: tensor.NewRNG(1).Named("dropout")}
			y := m.Forward(p, x) // [B, T, C]
			y.BackwardWithGrad(g.t["dy"])
			requireMoEClose(t, "y", y, g.t["y"], 1)
			requireMoEClose(t, "grad x", x.Grad(), g.t["grad.x"], 1)
			for _, q := range m.Params() {
				name := strings.TrimPrefix(q.Name, moeGoldenPrefix+".")
				require.NotNil(t, q.Grad(), "no gradient for %s", q.Name)
				requireMoEClose(t, "grad "+name, q.Grad(), g.t["grad."+name], 1)
			}
			st := m.TakeStats()
			require.Equal(t, 1, st.Micro, "micro-batches in stats")
			requireMoEScalar(t, "aux loss", st.AuxLoss, g.t["aux_loss"])
			requireMoEScalar(t, "z loss", st.ZLoss, g.t["z_loss"])
			require.Equal(t, g.ints("router.tokens_per_expert"), st.TokensPerExpert, "stats tokens per expert")

			g.checkLossGrads(t, m, b.Dev)
			g.checkRouting(t, m, p)
		})
	}
}

// moeGolden is one file of testdata/moe: tensors by name, and the configuration.
type moeGolden struct {
	t    map[string]*tensor.Tensor
	meta map[string]string
	moe  nn.MoEConfig
}

// loadMoEGolden reads path and checks that it was generated for moe and with this
// test's tolerance.
func loadMoEGolden(t *testing.T, path string, moe nn.MoEConfig) *moeGolden {
	t.Helper()
	ts, meta, err := checkpoint.ReadSafetensors(path)
	require.NoError(t, err)
	var fileMoE nn.MoEConfig
	require.NoError(t, json.Unmarshal([]byte(meta["megago_moe_config"]), &fileMoE), "megago_moe_config")
	require.Equal(t, moe, fileMoE, "%s was generated for another configuration", path)
	require.Equal(t, fmt.Sprintf("|got-want| <= %g*|want| + %g*max|want|", moeRtol, moeScale), meta["tolerance"],
		"gen.py's TOL_RTOL, TOL_SCALE")
	return &moeGolden{t: ts, meta: meta, moe: moe}
}

// build makes the layer on the device of the stored tensors and loads the stored weights
// into it. It fails unless every stored weight is one of the layer's parameters and
// every parameter is stored.
func (g *moeGolden) build(t *testing.T) (*nn.MoE, *nn.Builder) {
	t.Helper()
	x := g.t["x"] // [B, T, C]
	// Vocab and Position do not reach the layer; they make the configuration valid.
	cfg := nn.TransformerConfig{NumLayers: 1, Hidden: x.Shape()[2], Heads: 1, FFNHidden: g.moe.FFNHidden,
		Vocab: 1, Position: nn.NoPositions, Activation: nn.SwiGLU, Bias: false, MoE: g.moe}
	require.NoError(t, cfg.Validate())
	b := &nn.Builder{Dev: x.Device(), DType: tensor.F32, RNG: tensor.NewRNG(7), TP: parallel.Self()}
	m := nn.NewMoE(b, moeGoldenPrefix, cfg)
	global := map[string]*tensor.Tensor{}
	for name, v := range g.t {
		if strings.HasSuffix(name, ".weight") && !strings.Contains(name, "grad.") {
			global[moeGoldenPrefix+"."+name] = v
		}
	}
	require.Len(t, m.Params(), len(global), "parameters of the layer vs weights stored")
	require.NoError(t, nn.LoadGlobal(m.Params(), global))
	return m, b
}

// checkLossGrads runs the layer with dy = 0, where only the auxiliary losses have
// gradients (of x and the router weight), scaled by Pass.LossScale (0 means 1), and then
// checks that the stats sum the losses over the two micro-batches.
func (g *moeGolden) checkLossGrads(t *testing.T, m *nn.MoE, dev *tensor.Device) {
	t.Helper()
	for _, scale := range []float64{0, 0.25} {
		for _, q := range m.Params() {
			q.ZeroGrad()
		}
		x := g.input(dev)
		p := &nn.Pass{Ctx: context.Background(), Train: true, RNG: tensor.NewRNG(1).Named("dropout"), LossScale: scale}
		m.Forward(p, x).BackwardWithGrad(tensor.Zeros(dev, tensor.F32, x.Shape()...))
		factor := scale
		if factor == 0 {
			factor = 1
		}
		what := fmt.Sprintf("loss scale %g: ", scale)
		requireMoEClose(t, what+"aux grad x", x.Grad(), g.t["aux_grad.x"], factor)
		for _, q := range m.Params() {
			if q.Name == moeGoldenPrefix+".router.weight" {
				requireMoEClose(t, what+"aux grad router.weight", q.Grad(), g.t["aux_grad.router.weight"], factor)
			} else if q.Grad() != nil {
				require.Zero(t, maxAbs(q.Grad()), what+"%s has a gradient without dy", q.Name)
			}
		}
	}
	st := m.TakeStats()
	require.Equal(t, 2, st.Micro, "micro-batches in stats")
	requireMoEScalar(t, "aux loss of 2 micro-batches", st.AuxLoss/2, g.t["aux_loss"])
	requireMoEScalar(t, "z loss of 2 micro-batches", st.ZLoss/2, g.t["z_loss"])
}

// checkRouting runs the router alone on the stored input: probabilities, chosen experts
// and tokens per expert.
func (g *moeGolden) checkRouting(t *testing.T, m *nn.MoE, p *nn.Pass) {
	t.Helper()
	rt := m.Router.Route(p, g.input(g.t["x"].Device()))
	requireMoEClose(t, "router probs", rt.Probs, g.t["router.probs"], 1)
	require.Equal(t, g.routingMap(), rt.Map, "routing map (token-major, N·E)")
	tpe := make([]int64, len(rt.TokensPerExpert))
	for i, n := range rt.TokensPerExpert {
		tpe[i] = int64(n)
	}
	require.Equal(t, g.ints("router.tokens_per_expert"), tpe, "router tokens per expert")
}

// input returns a fresh copy of the stored x [B, T, C] that requires grad.
func (g *moeGolden) input(dev *tensor.Device) *tensor.Tensor {
	x := g.t["x"]
	return tensor.FromSlice(dev, tensor.ToSlice[float32](x), x.Shape()...).SetRequiresGrad(true)
}

// ints returns the stored integer tensor name as int64s.
func (g *moeGolden) ints(name string) []int64 { return tensor.ToSlice[int64](g.t[name]) }

// routingMap returns the stored selection as Routing.Map: token n goes to expert e at n·E+e.
func (g *moeGolden) routingMap() []bool {
	sel := g.t["router.selected"] // [N, k]
	n, k, e := sel.Shape()[0], sel.Shape()[1], g.moe.NumExperts
	m := make([]bool, n*e)
	for i, ex := range g.ints("router.selected") {
		m[i/k*e+int(ex)] = true
	}
	return m
}

// requireMoEClose fails unless got and factor·want have the same shape and every element
// is within the tolerance (moeRtol, moeScale) of the golden tests.
func requireMoEClose(t *testing.T, what string, got, want *tensor.Tensor, factor float64) {
	t.Helper()
	require.NotNil(t, got, "%s: no value", what)
	require.Equal(t, want.Shape(), got.Shape(), "%s: shape", what)
	gv, wv := tensor.ToSlice[float64](got.Detach()), tensor.ToSlice[float64](want)
	big := factor * maxAbs(want)
	worst, at := 0.0, 0 // the largest error as a fraction of the tolerance, and where
	for i := range gv {
		w := factor * wv[i]
		r := math.Abs(gv[i]-w) / (moeRtol*math.Abs(w) + moeScale*big)
		if math.IsNaN(r) {
			worst, at = math.Inf(1), i
			break
		}
		if r > worst {
			worst, at = r, i
		}
	}
	require.LessOrEqual(t, worst, 1.0, "%s[%d] = %.9g, want %.9g (error %.3g of the tolerance)", what, at, gv[at], factor*wv[at], worst)
}

// requireMoEScalar fails unless got is within a relative moeRtol + moeScale of the
// stored scalar want [1].
func requireMoEScalar(t *testing.T, what string, got float64, want *tensor.Tensor) {
	t.Helper()
	w := want.Item()
	require.InDelta(t, w, got, (moeRtol+moeScale)*math.Abs(w), what)
}

// maxAbs returns the largest magnitude in x.
func maxAbs(x *tensor.Tensor) float64 {
	m := 0.0
	for _, v := range tensor.ToSlice[float64](x.Detach()) {
		m = math.Max(m, math.Abs(v))
	}
	return m
}
