package nn

// MoELayerStats is what an MoE block records for logging between two TakeStats calls.
type MoELayerStats struct {
	// Layer is the layer's index in the model.
	Layer int
	// AuxLoss, SeqAuxLoss, GlobalAuxLoss and ZLoss are sums over micro-batches of the
	// coefficient-weighted load-balancing losses.
	AuxLoss, SeqAuxLoss, GlobalAuxLoss, ZLoss float64
	// Micro is the number of micro-batches (forward passes) recorded.
	Micro int
	// TokensPerExpert [E] counts the tokens this rank routed to each expert (before
	// dropping), summed over micro-batches.
	TokensPerExpert []int64
}

// record adds a forward pass's routing to the stats, unless p is a recomputation.
func (m *MoE) record(p *Pass, r Routing) {
	if p.replaying {
		return
	}
	m.stats.Micro++
	for e, n := range r.TokensPerExpert {
		m.stats.TokensPerExpert[e] += int64(n)
	}
}

// TakeStats returns the stats recorded since the last call and resets them: the token
// counts of the forward passes and the router's losses (RouterStats, recorded in
// training passes).
func (m *MoE) TakeStats() MoELayerStats {
	s := m.stats
	r := m.Router.TakeStats()
	s.AuxLoss, s.SeqAuxLoss, s.GlobalAuxLoss, s.ZLoss = r.AuxLoss, r.SeqAuxLoss, r.GlobalAuxLoss, r.ZLoss
	m.stats = MoELayerStats{Layer: m.layer, TokensPerExpert: make([]int64, m.experts)}
	return s
}

// moeHolder is a module that contains MoE blocks.
type moeHolder interface {
	moeBlocks() []*MoE
}

// MoEStats takes (TakeStats) the stats of every MoE block of the modules ms — models
// (GPT, BERT, T5), Blocks, TransformerLayers or MoE blocks — in layer order. Modules
// without MoE blocks contribute nothing.
func MoEStats(ms ...Module) []MoELayerStats {
	var out []MoELayerStats
	for _, m := range ms {
		if h, ok := m.(moeHolder); ok {
			for _, b := range h.moeBlocks() {
				out = append(out, b.TakeStats())
			}
		}
	}
	return out
}

func (m *MoE) moeBlocks() []*MoE { return []*MoE{m} }

// ModuleState returns the non-trainable state of the modules ms — models, Blocks,
// layers, MoE blocks or routers — for checkpoints (checkpoint.State.Tensors): their
// routers' expert biases (Router.State).
func ModuleState(ms ...Module) []NamedTensor {
	var out []NamedTensor
	for _, r := range routersOf(ms) {
		out = append(out, r.State()...)
	}
	return out
}

func (l *TransformerLayer) moeBlocks() []*MoE {
	if l.MoE == nil {
		return nil
	}
	return []*MoE{l.MoE}
}

func (blk *Block) moeBlocks() []*MoE {
	if blk == nil {
		return nil
	}
	var out []*MoE
	for _, l := range blk.Layers {
		out = append(out, l.moeBlocks()...)
	}
	return out
}

func (m *GPT) moeBlocks() []*MoE  { return m.Block.moeBlocks() }
func (m *BERT) moeBlocks() []*MoE { return m.Block.moeBlocks() }
func (m *T5) moeBlocks() []*MoE   { return append(m.Encoder.moeBlocks(), m.Decoder.moeBlocks()...) }
