package nn

// Parts is what a trainer or a checkpoint needs to know of a model on this rank: the
// parameters of each model chunk, and the copies of tied weights (the word embedding on
// the first stage and its Shared copy on the last) whose gradients are summed over the
// embedding group. Modules are the chunks themselves, for what a step does to a model
// besides its parameters' update (UpdateExpertBias).
type Parts struct {
	Chunks  [][]*Param
	Tied    []*Param
	Modules []Module
}

// Params returns the parameters of every chunk, in order.
func (p Parts) Params() []*Param {
	var out []*Param
	for _, c := range p.Chunks {
		out = append(out, c...)
	}
	return out
}

// GPTParts returns the Parts of this rank's GPT chunks (NewGPTChunks).
func GPTParts(ms []*GPT) Parts {
	return chunkParts(ms, func(m *GPT) *Param {
		switch {
		case m.Word != nil && m.Output == nil && !m.Config.Untied: // first stage; the head is elsewhere
			return m.Word.Weight
		case m.Output != nil && m.Output.Weight.Shared:
			return m.Output.Weight
		}
		return nil
	})
}

// BERTParts returns the Parts of this rank's BERT chunks (NewBERTChunks).
func BERTParts(ms []*BERT) Parts {
	return chunkParts(ms, func(m *BERT) *Param {
		switch {
		case m.Word != nil && m.LMOutput == nil:
			return m.Word.Weight
		case m.LMOutput != nil && m.LMOutput.Weight.Shared:
			return m.LMOutput.Weight
		}
		return nil
	})
}

// chunkParts returns the Parts of chunks ms, with tied(m) (nil: none) the copy of a tied
// weight chunk m holds.
func chunkParts[M Module](ms []M, tied func(M) *Param) Parts {
	var p Parts
	for _, m := range ms {
		p.Chunks = append(p.Chunks, m.Params())
		p.Modules = append(p.Modules, m)
		if t := tied(m); t != nil {
			p.Tied = append(p.Tied, t)
		}
	}
	return p
}

// T5Parts returns the Parts of a T5 (NewT5OnMesh): one chunk, no tied copies to keep in
// sync (its word embedding and output layer are one Param).
func T5Parts(m *T5) Parts {
	return Parts{Chunks: [][]*Param{m.Params()}, Modules: []Module{m}}
}
