package cuda

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"megago/nn"
	"megago/optim"
	"megago/parallel"
	"megago/tensor"
)

// gptLosses trains a small GPT (with mixture-of-experts layers where moe says so) for
// steps AdamW steps on fixed random tokens on dev in dtype dt (bf16 with fp32 master
// weights) and returns the losses.
func gptLosses(t *testing.T, dev *tensor.Device, dt tensor.DType, steps int, moe nn.MoEConfig) []float64 {
	t.Helper()
	const layers, dim, heads, vocab, seq, batch = 2, 64, 2, 96, 32, 2
	cfg := nn.GPTConfig{TransformerConfig: nn.TransformerConfig{NumLayers: layers, Hidden: dim, Heads: heads,
		Vocab: vocab, MaxPosition: seq, Bias: true, MoE: moe}}
	b := &nn.Builder{Dev: dev, DType: dt, RNG: tensor.NewRNG(1).Named("init"), TP: parallel.Self()}
	model, err := nn.NewGPT(b, cfg, nn.WholeModel(layers))
	if err != nil {
		t.Fatal(err)
	}
	opt, err := optim.New(model.Params(), optim.Config{Rule: optim.AdamW{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}, LR: 3e-3, WeightDecay: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(2, 3))
	ids, labels := make([]int64, batch*seq), make([]int64, batch*seq)
	for i := range ids {
		ids[i] = r.Int64N(vocab / 4) // a skewed distribution the model can learn
		labels[i] = (ids[i] * 7) % vocab
	}
	var losses []float64
	ctx := context.Background()
	for range steps {
		s := dev.NewScope()
		x, y := tensor.FromSlice(dev, ids, batch, seq), tensor.FromSlice(dev, labels, batch, seq)
		opt.ZeroGrad()
		p := &nn.Pass{Ctx: ctx, Train: true, RNG: tensor.NewRNG(4).Named("dropout")}
		loss, _ := model.Loss(p, model.Forward(p, x, nil), y)
		loss.Backward()
		if _, err := opt.Step(ctx); err != nil {
			t.Fatal(err)
		}
		losses = append(losses, loss.Item())
		s.Close()
	}
	return losses
}

// TestGPUGPTTrainingFollowsCPU trains the same GPT on the CPU and on the GPU: in fp32 the
// losses agree to float32 rounding carried through a few steps, in bf16 (fp32 master
// weights) within 3% of the fp32 CPU run. The second case has a mixture-of-experts
// layer (4 experts, top-2, aux and z losses, grouped GEMM) beside a dense one.
func TestGPUGPTTrainingFollowsCPU(t *testing.T) {
	for _, tc := range []struct {
		name string
		moe  nn.MoEConfig
	}{
		{"dense", nn.MoEConfig{}},
		{"moe", nn.MoEConfig{NumExperts: 4, LayerFreq: 2, TopK: 2, FFNHidden: 96, AuxLossCoeff: 1e-2, ZLossCoeff: 1e-3, GroupedGEMM: true}},
	} {
		t.Run(tc.name, func(t *testing.T) { gpuFollowsCPU(t, tc.moe) })
	}
}

// gpuFollowsCPU is TestGPUGPTTrainingFollowsCPU for one model.
func gpuFollowsCPU(t *testing.T, moe nn.MoEConfig) {
	b := openTestBackend(t)
	const steps = 6
	cpu := gptLosses(t, tensor.NewCPU(), tensor.F32, steps, moe)
	gpu := gptLosses(t, tensor.NewDevice(b), tensor.F32, steps, moe)
	bf16 := gptLosses(t, tensor.NewDevice(b), tensor.BF16, steps, moe)
	t.Logf("cpu  %.5f", cpu)
	t.Logf("gpu  %.5f", gpu)
	t.Logf("bf16 %.5f", bf16)
	if cpu[steps-1] >= cpu[0] {
		t.Errorf("the CPU run does not learn: %v", cpu)
	}
	for i := range cpu {
		// Summation order differs between the backends: relative 1e-3 after a few steps.
		if d := math.Abs(gpu[i]-cpu[i]) / cpu[i]; d > 1e-3 {
			t.Errorf("fp32 step %d: GPU loss %.6f, CPU %.6f (relative %.2g)", i, gpu[i], cpu[i], d)
		}
		if d := math.Abs(bf16[i]-cpu[i]) / cpu[i]; d > 0.03 {
			t.Errorf("bf16 step %d: GPU loss %.6f, CPU fp32 %.6f (relative %.2g > 3%%)", i, bf16[i], cpu[i], d)
		}
	}
}
