package main

import (
	"encoding/json"
	"fmt"

	"megago/checkpoint"
	"megago/internal/device"
	"megago/nn"
	"megago/parallel"
	"megago/serve"
	"megago/tensor"
)

// serveModels are the TP ranks' shards of the served GPT, one per goroutine rank.
type serveModels struct {
	models  []*nn.GPT // [tp]
	devs    []*tensor.Device
	cfg     nn.GPTConfig
	device  string
	release func() // ends the ranks' goroutines
}

// loadServeModels reads the checkpoint --load names and builds a model per TP rank
// holding its weights. It lowers --inference-max-seq-length to the model's learned
// positions when the flag was not given, and refuses it when it was.
func loadServeModels(c *serveFlags) (*serveModels, error) {
	model, global, err := readServeCheckpoint(c)
	if err != nil {
		return nil, err
	}
	if model.Arch != checkpoint.ArchGPT {
		return nil, fmt.Errorf("--load %s holds a %s model; serve runs GPT models", c.load, model.Arch)
	}
	ms := &serveModels{device: c.device, release: func() {}}
	if err := json.Unmarshal(model.Config, &ms.cfg); err != nil {
		return nil, fmt.Errorf("--load %s: model configuration: %w", c.load, err)
	}
	if ms.cfg.Position == nn.LearnedPositions && c.maxSeqLen > ms.cfg.MaxPosition {
		if c.seqLenExplicit {
			return nil, fmt.Errorf("--inference-max-seq-length %d exceeds the model's %d learned positions", c.maxSeqLen, ms.cfg.MaxPosition)
		}
		c.maxSeqLen = ms.cfg.MaxPosition
	}
	for range c.tp {
		dev, err := device.Open(c.device)
		if err != nil {
			ms.close()
			return nil, err
		}
		ms.devs = append(ms.devs, dev)
	}
	build := func(tp parallel.Comm) (*nn.GPT, error) {
		b := &nn.Builder{Dev: ms.devs[tp.Rank()], DType: tensor.F32, RNG: tensor.NewRNG(0), TP: tp}
		m, err := nn.NewGPT(b, ms.cfg, nn.Stage{})
		if err != nil {
			return nil, err
		}
		return m, checkpoint.SetParams(m.Params(), model, global)
	}
	models, release, err := serve.LocalTP(c.tp, build)
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

// describe says what is served, for the start-up line.
func (ms *serveModels) describe(name string, maxSeqLen int) string {
	c := ms.cfg
	return fmt.Sprintf("%s (GPT: %d layers, hidden %d, %d heads, vocabulary %d; TP=%d on %s; %d positions per request)",
		name, c.NumLayers, c.Hidden, c.Heads, c.Vocab, len(ms.models), ms.device, maxSeqLen)
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
