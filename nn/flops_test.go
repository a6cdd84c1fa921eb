package nn_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"megago/nn"
)

// TestTrainingFLOPs checks the count against BENCHMARKS.md's table of workloads (its
// model GFLOP/step column, rounded there to 0.01 GFLOP).
func TestTrainingFLOPs(t *testing.T) {
	const gflop = 1e9
	tests := []struct {
		name           string
		cfg            nn.TransformerConfig
		vp, batch, seq int
		weights        int     // N_mm = 12·L·C² + Vp·C
		gflopsPerStep  float64 // BENCHMARKS.md
	}{
		{"W1 GPT-2 124M", nn.TransformerConfig{NumLayers: 12, Hidden: 768, Heads: 12}, 50304, 4, 64, 12*12*768*768 + 50304*768, 191.61},
		{"W2 small GPT", nn.TransformerConfig{NumLayers: 4, Hidden: 256, Heads: 4}, 8192, 8, 256, 12*4*256*256 + 8192*256, 70.87},
		{"W3 long context", nn.TransformerConfig{NumLayers: 4, Hidden: 256, Heads: 4}, 8192, 2, 2048, 12*4*256*256 + 8192*256, 231.93},
		{"F given as 4C", nn.TransformerConfig{NumLayers: 4, Hidden: 256, FFNHidden: 1024}, 8192, 8, 256, 12*4*256*256 + 8192*256, 70.87},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.weights, nn.MatMulWeights(tt.cfg, tt.vp))
			assert.InDelta(t, tt.gflopsPerStep, nn.TrainingFLOPs(tt.cfg, tt.vp, tt.batch, tt.seq)/gflop, 0.005)
		})
	}
}

// TestMatMulWeightsFFN checks a non-default MLP width against the formula's terms
// written out: L·(4C² + 2C·F) + Vp·C.
func TestMatMulWeightsFFN(t *testing.T) {
	c := nn.TransformerConfig{NumLayers: 2, Hidden: 8, FFNHidden: 20}
	assert.Equal(t, 2*(4*8*8+2*8*20)+100*8, nn.MatMulWeights(c, 100))
	assert.Equal(t, 2*(4*8*8+2*8*20), nn.MatMulWeights(c, 0), "no output layer")
}

// The model FLOPs of one step of BENCHMARKS.md's W2: a 4-layer GPT of hidden 256 over a
// vocabulary padded to 8192, 8 sequences of 256 tokens.
func ExampleTrainingFLOPs() {
	c := nn.TransformerConfig{NumLayers: 4, Hidden: 256, Heads: 4}
	fmt.Printf("N = %d weights in matrix multiplies\n", nn.MatMulWeights(c, 8192))
	fmt.Printf("%.2f GFLOP per step\n", nn.TrainingFLOPs(c, 8192, 8, 256)/1e9)
	// Output:
	// N = 5242880 weights in matrix multiplies
	// 70.87 GFLOP per step
}

// TestTrainingFLOPsW4 checks BENCHMARKS.md's W4 (W2 with 8 experts of hidden 512, top-2)
// against a count by hand: W2's 70.87 GFLOP (experts of hidden 512 × 2 active = the dense
// 4C) plus the router's 6 · tokens · L · E·C.
func TestTrainingFLOPsW4(t *testing.T) {
	w2 := nn.TransformerConfig{NumLayers: 4, Hidden: 256, Heads: 4, Vocab: 8192}
	w4 := w2
	w4.MoE = nn.MoEConfig{NumExperts: 8, FFNHidden: 512, TopK: 2}
	tokens := 8.0 * 256
	router := 6 * tokens * 4 * 8 * 256
	assert.InDelta(t, nn.TrainingFLOPs(w2, 8192, 8, 256)+router, nn.TrainingFLOPs(w4, 8192, 8, 256), 1)
	assert.InDelta(t, 70.968e9, nn.TrainingFLOPs(w4, 8192, 8, 256), 1e6)
}
