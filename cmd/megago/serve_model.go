package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"

	"megago/checkpoint"
	"megago/internal/device"
	"megago/nn"
	"megago/parallel"
	"megago/serve"
	"megago/tensor"
)

// serveCheckpoint is the model --load names: its weights and configuration, and the
// parallel sizes it is served at.
type serveCheckpoint struct {
	model  checkpoint.Model
	global map[string]*tensor.Tensor
	cfg    nn.GPTConfig
	sizes  parallel.Sizes
}

// readServeModel reads the checkpoint --load names. It lowers
// --inference-max-seq-length to the model's learned positions when the flag was not
// given, and refuses it when it was.
func readServeModel(c *serveFlags) (*serveCheckpoint, error) {
	model, global, err := readServeCheckpoint(c)
	if err != nil {
		return nil, err
	}
	if model.Arch != checkpoint.ArchGPT {
		return nil, fmt.Errorf("--load %s holds a %s model; serve runs GPT models", c.load, model.Arch)
	}
	ck := &serveCheckpoint{model: model, global: global, sizes: c.sizes()}
	if err := json.Unmarshal(model.Config, &ck.cfg); err != nil {
		return nil, fmt.Errorf("--load %s: model configuration: %w", c.load, err)
	}
	if e := ck.cfg.MoE.NumExperts; c.ep > 1 && (e == 0 || e%c.ep != 0) {
		return nil, fmt.Errorf("--expert-model-parallel-size %d does not divide the model's %d experts", c.ep, e)
	}
	if ck.cfg.Position == nn.LearnedPositions && c.maxSeqLen > ck.cfg.MaxPosition {
		if c.seqLenExplicit {
			return nil, fmt.Errorf("--inference-max-seq-length %d exceeds the model's %d learned positions", c.maxSeqLen, ck.cfg.MaxPosition)
		}
		c.maxSeqLen = ck.cfg.MaxPosition
	}
	return ck, nil
}

// build returns the shard of the model that rank tp.Rank() of the TP group tp holds, on
// dev, with its weights: the experts of MoE layers split over the expert-TP × EP groups
// of ck.sizes among the TP ranks.
func (ck *serveCheckpoint) build(ctx context.Context, dev *tensor.Device, tp parallel.Comm) (*nn.GPT, error) {
	mesh, err := parallel.NewMesh(ctx, tp, ck.sizes)
	if err != nil {
		return nil, err
	}
	b := &nn.Builder{Dev: dev, DType: tensor.F32, RNG: tensor.NewRNG(0), TP: tp, Experts: nn.MeshExperts(mesh)}
	m, err := nn.NewGPT(b, ck.cfg, nn.Stage{})
	if err != nil {
		return nil, err
	}
	if err := checkpoint.SetParams(m.Params(), ck.model, ck.global); err != nil {
		return nil, err
	}
	return m, checkpoint.SetState(nn.ModuleState(m), ck.global) // the routers' expert biases

}

// serveModels are the TP ranks' shards of the served GPT, one per goroutine rank.
type serveModels struct {
	models  []*nn.GPT // [tp]
	devs    []*tensor.Device
	cfg     nn.GPTConfig
	device  string
	release func() // ends the ranks' goroutines
}

// loadServeModels reads the checkpoint --load names (readServeModel) and builds a model
// per goroutine TP rank holding its weights.
func loadServeModels(c *serveFlags) (*serveModels, error) {
	ck, err := readServeModel(c)
	if err != nil {
		return nil, err
	}
	ms := &serveModels{cfg: ck.cfg, device: c.device, release: func() {}}
	for range c.tp {
		dev, err := device.Open(c.device)
		if err != nil {
			ms.close()
			return nil, err
		}
		ms.devs = append(ms.devs, dev)
	}
	models, release, err := serve.LocalTP(c.tp, func(tp parallel.Comm) (*nn.GPT, error) {
		return ck.build(context.Background(), ms.devs[tp.Rank()], tp)
	})
	if err != nil {
		ms.close()
		return nil, err
	}
	ms.models, ms.release = models, func() { release() }
	return ms, nil
}

// close ends the ranks and gives the devices back.
func (ms *serveModels) close() {
	ms.release()
	device.CloseAll(ms.devs)
}

// describeServed says what is served, for the start-up line: the model name, its
// shape, how its TP ranks run, on which device, and the positions per request.
func describeServed(name string, c nn.GPTConfig, ranks, device string, maxSeqLen int) string {
	return fmt.Sprintf("%s (GPT: %d layers, hidden %d, %d heads, vocabulary %d; %s on %s; %d positions per request)",
		name, c.NumLayers, c.Hidden, c.Heads, c.Vocab, ranks, device, maxSeqLen)
}

// ranksText says how the ranks run the model for the start-up line: "TP=2" and how,
// with the experts' layout for an MoE model ("TP=2 (experts: EP=2 × expert-TP=1)").
func (c *serveFlags) ranksText(m nn.GPTConfig, how string) string {
	s := fmt.Sprintf("TP=%d%s", c.tp, how)
	if m.MoE.NumExperts > 0 {
		s += fmt.Sprintf(" (experts: EP=%d × expert-TP=%d)", c.ep, cmp.Or(c.etp, c.tp))
	}
	return s
}

// readServeCheckpoint reads the model and its global tensors from --load, in the format
// --from names, as megago convert does.
func readServeCheckpoint(c *serveFlags) (checkpoint.Model, map[string]*tensor.Tensor, error) {
	switch c.from {
	case "hf":
		return checkpoint.ImportHF(c.load)
	case "megatron":
		m, g, _, err := checkpoint.ImportMegatron(c.load, checkpoint.MegatronOptions{Iteration: c.iteration})
		return m, g, err
	}
	man, g, err := checkpoint.ReadGlobal(c.load, c.iteration)
	if err != nil {
		return checkpoint.Model{}, nil, err
	}
	return man.Model, g, nil
}
