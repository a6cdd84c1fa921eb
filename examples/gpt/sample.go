package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"megago/data"
	"megago/nn"
	"megago/parallel"
	"megago/train"
)

// generate continues --prompt with --gen-tokens tokens and returns the new text (the
// same on every rank). nn.Generate needs a whole model built without sequence or
// context parallelism; with PP > 1, SP or CP > 1 every rank first builds one (its TP
// shard of every layer) and fills it from the stages that trained each part, broadcast
// over its PP group (CP ranks hold the same parameters). The first TP group (PP stage 0, DP rank 0) generates and shares the text; with
// experts spread over other ranks (EP > 1, expert-TP ≠ TP), the first world ranks that
// make up whole TP groups and whole expert groups generate together (generators).
func generate(ctx context.Context, cfg *config, tok data.Tokenizer, mesh *parallel.Mesh, chunks []*nn.GPT, b *nn.Builder) (string, error) {
	m := chunks[0]
	if cfg.PP > 1 || cfg.Chunks > 1 || cfg.SequenceParallel || cfg.CP.Size > 1 {
		var err error
		if m, err = wholeModel(ctx, cfg, mesh, chunks, b); err != nil {
			return "", err
		}
	}
	var text string
	if mesh.Rank() < generators(mesh.Sizes()) {
		prompt := tok.Encode(cfg.Prompt)
		if len(prompt) == 0 {
			prompt = []int32{tok.Special().EOD}
		}
		n := min(cfg.GenTokens, cfg.MaxPositionEmbeddings+1-len(prompt))
		if n < 1 {
			return "", fmt.Errorf("--prompt has %d tokens, leaving no room in %d positions", len(prompt), cfg.MaxPositionEmbeddings)
		}
		o := nn.GenerateOptions{MaxNewTokens: n, Temperature: cfg.Temperature, TopK: cfg.TopK, Seed: cfg.Seed}
		if eod := tok.Special().EOD; eod >= 0 {
			o.EOD = []int32{eod}
		}
		out, err := nn.Generate(ctx, m, [][]int32{prompt}, o)
		if err != nil {
			return "", err
		}
		ids := out[0]
		if len(ids) > 0 && len(o.EOD) > 0 && ids[len(ids)-1] == o.EOD[0] {
			ids = ids[:len(ids)-1]
		}
		text = tok.Decode(ids)
	}
	return text, nil // only world rank 0 prints it
}

// generators returns how many ranks generate, world ranks [0, n) of the first pipeline
// stage: the least common multiple of the TP group's size and the expert-TP × EP
// group's, so that every collective of the model — over TP, and over the experts'
// groups — has all its members generating (TP groups beyond the first generate the same
// text, from the same prompt and seed).
func generators(s parallel.Sizes) int {
	a, b := s.TP, s.ETP*s.EP
	n := a * b
	for b != 0 {
		a, b = b, a%b
	}
	return n / a
}

// wholeModel returns this rank's TP (and EP) shard of the whole model, without sequence
// or context parallelism or recomputation, holding the trained parameters: each parameter is
// broadcast over the PP group from the stage that holds it.
func wholeModel(ctx context.Context, cfg *config, mesh *parallel.Mesh, chunks []*nn.GPT, b *nn.Builder) (*nn.GPT, error) {
	whole := &nn.Builder{Dev: b.Dev, DType: b.DType, RNG: b.RNG, TP: b.TP, Experts: b.Experts} // experts stay split over EP
	mc := chunks[0].Config
	mc.CP, mc.CPCommType, mc.CPHierarchy = 1, "", "" // whole sequences on one rank
	m, err := nn.NewGPT(whole, mc, nn.Stage{})
	if err != nil {
		return nil, err
	}
	local := map[string]*nn.Param{}
	for _, c := range chunks {
		for _, p := range c.Params() {
			if !p.Shared {
				local[p.Name] = p
			}
		}
	}
	for _, p := range m.Params() {
		owner, err := ownerStage(p.Name, cfg)
		if err != nil {
			return nil, err
		}
		if owner == mesh.Coord().PP {
			src, ok := local[p.Name]
			if !ok {
				return nil, fmt.Errorf("generation: stage %d should hold %s", owner, p.Name)
			}
			p.Tensor.CopyFrom(src.Tensor)
		}
		if err := mesh.PP().Broadcast(ctx, p.Tensor, owner); err != nil {
			return nil, fmt.Errorf("generation: gathering %s: %w", p.Name, err)
		}
	}
	return m, nil
}

// ownerStage returns the pipeline stage that trains the parameter called name
// (train.Stages: the embedding on the first stage, the final norm and head on the last).
func ownerStage(name string, cfg *config) (int, error) {
	switch {
	case strings.HasPrefix(name, "embedding."):
		return 0, nil
	case strings.HasPrefix(name, "final_norm.") || strings.HasPrefix(name, "output."):
		return cfg.PP - 1, nil
	case strings.HasPrefix(name, "layers."):
		rest := strings.TrimPrefix(name, "layers.")
		layer, err := strconv.Atoi(rest[:strings.IndexByte(rest+".", '.')])
		if err != nil {
			break
		}
		for stage := range cfg.PP {
			for chunk := range cfg.Chunks {
				first, n, err := train.ChunkLayers(cfg.NumLayers, cfg.PP, stage, cfg.Chunks, chunk)
				if err != nil {
					return 0, err
				}
				if layer >= first && layer < first+n {
					return stage, nil
				}
			}
		}
	}
	return 0, fmt.Errorf("generation: no pipeline stage holds parameter %s", name)
}
