package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"megago/checkpoint"
	"megago/internal/device"
	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// serveModels are the TP ranks' shards of the served GPT, one per goroutine rank.
type serveModels struct {
	models  []*nn.GPT // [tp]
	devs    []*tensor.Device
	cfg     nn.GPTConfig
	device  string
	release func() // ends the ranks' goroutines (TP > 1)
}

// loadServeModels reads the checkpoint --load names and builds a model per TP rank
// holding its weights. It lowers --inference-max-seq-length to the model's learned
// positions when the flag was not given, and refuses it when it was.
func loadServeModels(ctx context.Context, c *serveFlags) (*serveModels, error) {
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
	if err := ms.build(c.tp, build); err != nil {
		ms.close()
		return nil, err
	}
	return ms, nil
}

// build runs build on each of tp goroutine ranks, whose TP group stays open (for the
// engine's collectives) until release.
func (ms *serveModels) build(tp int, build func(parallel.Comm) (*nn.GPT, error)) error {
	if tp == 1 {
		m, err := build(parallel.Self())
		ms.models = []*nn.GPT{m}
		return err
	}
	ms.models = make([]*nn.GPT, tp)
	ready := make(chan error, tp)
	stop := make(chan struct{})
	finished := make(chan error, 1)
	go func() {
		finished <- parallel.RunLocal(tp, func(comm parallel.Comm) error {
			m, err := build(comm)
			ms.models[comm.Rank()] = m
			ready <- err
			<-stop
			return err
		})
	}()
	var errs []error
	for range tp {
		errs = append(errs, <-ready)
	}
	ms.release = func() { close(stop); <-finished }
	if err := errors.Join(errs...); err != nil {
		ms.release()
		ms.release = func() {}
		return err
	}
	return nil
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
