package main

import (
	"megago/examples/internal/loop"
	"megago/nn"
	"megago/parallel"
)

// The mixture-of-experts seams of the GPT example (--num-experts, ...): the mesh's
// expert-parallel sizes, the expert groups the model's MoE layers use, and the
// statistics the loop logs.

// meshSizes returns the parallel sizes the mesh is built with: TP, CP and PP (DP is
// the rest of the world), and the experts' EP and expert-TP.
func (c *config) meshSizes() parallel.Sizes {
	return parallel.Sizes{TP: c.TP, CP: c.CP.Size, PP: c.PP, EP: c.MoE.EP, ETP: c.MoE.ETP}
}

// expertGroups returns the communicators of the model's MoE layers (EP, expert-TP,
// their product) from the mesh.
func expertGroups(mesh *parallel.Mesh) nn.ExpertGroups {
	return nn.MeshExperts(mesh)
}

// moeLog returns what the loop logs of the model's MoE layers (nil for a dense model):
// their statistics over this rank's chunks (nn.MoEStats), reduced over every rank.
func (c *config) moeLog(m nn.GPTConfig, chunks []*nn.GPT) *loop.MoELog {
	if m.MoE.NumExperts == 0 {
		return nil
	}
	return &loop.MoELog{Config: m.MoE, NumLayers: m.NumLayers, PerLayer: c.MoE.PerLayerLog,
		Stats: func() []loop.MoELayerStats {
			ms := make([]nn.Module, len(chunks))
			for i, c := range chunks {
				ms[i] = c
			}
			return nn.MoEStats(ms...)
		}}
}
