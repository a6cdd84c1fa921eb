package checkpoint

import (
	"bytes"
	"testing"

	"megago/nn"
)

// The stored configuration does not pin the layout: a GPT at TP 2, expert-parallel 2 and
// expert-TP 1 has the Model of the same GPT on one rank, and a Model stored with the
// experts' layout, dispatcher or grouped GEMM set (as the first MoE checkpoints were)
// loads into one with others.
func TestGPTModelLayoutFree(t *testing.T) {
	cfg := nn.GPTConfig{TransformerConfig: nn.TransformerConfig{NumLayers: 2, Hidden: 16, Heads: 2, Vocab: 64, MaxPosition: 8,
		MoE: nn.MoEConfig{NumExperts: 4, TopK: 2}}}
	one := GPTModel(cfg)
	cfg.TP, cfg.MoE.EP, cfg.MoE.ETP = 2, 2, 1
	if got := GPTModel(cfg); !bytes.Equal(got.Config, one.Config) {
		t.Errorf("the Model at TP 2, EP 2, expert-TP 1 is\n%s\nnot\n%s", got.Config, one.Config)
	}
	stored := one
	stored.Config = bytes.Replace(one.Config, []byte(`"TopK":2`), []byte(`"TopK":2,"GroupedGEMM":true,"Dispatcher":"alltoall","EP":2,"ETP":1`), 1)
	if bytes.Equal(stored.Config, one.Config) {
		t.Fatalf("no MoE TopK in %s", one.Config)
	}
	if err := stored.Compatible(one); err != nil {
		t.Errorf("%s: %v", stored.Config, err)
	}
	cfg.MoE.TopK = 1
	if err := stored.Compatible(GPTModel(cfg)); err == nil || err.Error() != "checkpoint: the checkpoint holds another gpt architecture: MoE.TopK 2, not 1" {
		t.Errorf("other top-k: %v", err)
	}
}
