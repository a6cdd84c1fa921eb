package checkpoint

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"

	megago "megago"
	"megago/nn"
	"megago/optim"
	"megago/parallel"
	"megago/tensor"
)

// State is one rank's training state: what Save writes and Load restores. Every rank of
// the mesh passes its own State; Model, Iteration, ConsumedSamples, Seed and Extra must
// be the same on all of them (rank 0's are recorded).
type State struct {
	// Model names the architecture (GPTModel, BERTModel, T5Model); Load refuses a
	// checkpoint of another one.
	Model Model
	// Params are this rank's parameters (nn.Parts.Params()): TP shards of the layers
	// of its pipeline stage. A Shared copy of a tied embedding is not saved; Load fills
	// it from the embedding.
	Params []*nn.Param
	// Tensors are this rank's non-trainable state tensors (nn.Stateful: a
	// mixture-of-experts router's expert bias), each whole and the same on every rank of
	// its pipeline stage: saved by TP and DP rank 0 of the stage, loaded on every rank.
	Tensors []nn.NamedTensor
	// Optimizer, if not nil, has its state saved and restored: per-parameter tensors
	// (sharded over DP under the distributed optimizer), step count, loss scaler and
	// learning-rate schedule.
	Optimizer *optim.Optimizer
	// Iteration is the number of training iterations done.
	Iteration int
	// ConsumedSamples is the data position (data.PretrainingSampler.Consumed).
	ConsumedSamples int
	// Seed is the run's random seed (dropout and data order are keyed by it and by the
	// iteration and sample indices, so nothing else of the random state needs saving).
	Seed uint64
	// Extra holds the caller's own values, recorded in the manifest.
	Extra map[string]string
}

// outPiece is a piece this rank writes: the bytes of a live tensor (t) or a snapshot
// (raw).
type outPiece struct {
	name   string
	region tensor.Region
	flat   [2]int
	dtype  tensor.DType
	shape  tensor.Shape // the stored tensor's shape: the region's, or [n] for a flat range
	t      *tensor.Tensor
	raw    []byte
}

// snapshot copies the piece's bytes off its tensor.
func (p *outPiece) snapshot() {
	if p.t != nil {
		p.raw, p.t = tensorBytes(p.t), nil
	}
}

// stTensor returns the piece as a tensor to write. A live tensor is read in chunks.
func (p *outPiece) stTensor() stTensor {
	return stTensor{name: p.name, dtype: p.dtype, shape: p.shape, write: func(w io.Writer) error {
		if p.t == nil {
			_, err := w.Write(p.raw)
			return err
		}
		const chunk = 1 << 22 // bytes
		flat := p.t.Detach().Reshape(p.t.Numel())
		per := max(chunk/p.dtype.Size(), 1)
		buf := make([]byte, min(per, flat.Numel())*p.dtype.Size())
		be := flat.Device().Backend()
		for off := 0; off < flat.Numel(); off += per {
			n := min(per, flat.Numel()-off)
			b := buf[:n*p.dtype.Size()]
			be.ReadHost(flat.Narrow(0, off, n).Span(), b)
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
		return nil
	}}
}

// rankData is what one rank writes.
type rankData struct {
	model, optim           []outPiece
	writeModel, writeOptim bool
	sharded                bool // the optimizer state is split between data-parallel ranks
}

// writers is a rank's place in the groups whose rank 0 stores a replicated piece: TP and
// DP × CP for dense parameters (dp is the rank's replica), expert-TP and expert-DP for
// expert ones (param.Param.Expert; the expert-DP axis spans the CP ranks too).
type writers struct{ tp, dp, etp, edp int }

// writersOf returns the writers of mesh's rank: its coordinates on the dense and the
// expert axes.
func writersOf(mesh *parallel.Mesh) writers {
	c, e := mesh.Coord(), mesh.ExpertCoord()
	return writers{tp: c.TP, dp: replica(mesh.Sizes(), c), etp: e.ETP, edp: e.EDP}
}

// tpFirst reports whether this rank is the first of p's tensor-parallel replicas: p is
// split over (expert-)TP, or this is (expert-)TP rank 0.
func (w writers) tpFirst(p *nn.Param) bool {
	if p.Expert {
		return p.PartitionDim >= 0 || w.etp == 0
	}
	return p.PartitionDim >= 0 || w.tp == 0
}

// dpFirst reports whether this rank is (expert-)DP rank 0 for p.
func (w writers) dpFirst(p *nn.Param) bool {
	if p.Expert {
		return w.edp == 0
	}
	return w.dp == 0
}

// collect returns the pieces this rank saves, so that each element is stored once: a
// parameter from DP rank 0, a TP-replicated one from TP rank 0 of those (expert
// parameters: expert-DP and expert-TP), never a Shared copy; state tensors from TP and
// DP rank 0; optimizer state from the same ranks as the parameter's values, except that
// when it is sharded between (expert-)DP ranks (the distributed optimizer) every one
// stores its part.
func collect(st *State, w writers) (rankData, error) {
	var d rankData
	owned := map[string]*nn.Param{}
	for _, p := range st.Params {
		if p.Shared {
			continue
		}
		if _, dup := owned[p.Name]; dup {
			return d, fmt.Errorf("checkpoint: parameter %s appears twice", p.Name)
		}
		owned[p.Name] = p
	}
	for _, name := range sortedKeys(owned) {
		if p := owned[name]; w.tpFirst(p) && w.dpFirst(p) {
			d.model = append(d.model, outPiece{name: name, region: p.Region(), flat: [2]int{0, p.Numel()},
				dtype: p.DType(), shape: p.Shape().Clone(), t: p.Tensor})
		}
	}
	for _, t := range st.Tensors {
		if _, dup := owned[t.Name]; dup {
			return d, fmt.Errorf("checkpoint: state tensor %s has the name of a parameter", t.Name)
		}
		if w.tp == 0 && w.dp == 0 {
			d.model = append(d.model, outPiece{name: t.Name, region: tensor.Whole(t.Tensor.Shape()...),
				flat: [2]int{0, t.Tensor.Numel()}, dtype: t.Tensor.DType(), shape: t.Tensor.Shape().Clone(), t: t.Tensor})
		}
	}
	slices.SortFunc(d.model, func(a, b outPiece) int { return cmp.Compare(a.name, b.name) })
	d.writeModel = w.dp == 0 || len(d.model) > 0
	if st.Optimizer == nil {
		return d, nil
	}
	return d, collectOptim(&d, st.Optimizer, owned, w)
}

// collectOptim adds the optimizer's state pieces this rank saves to d (see collect).
func collectOptim(d *rankData, opt *optim.Optimizer, owned map[string]*nn.Param, w writers) error {
	covered := map[string]int{}
	firstKind := ""
	type statePiece struct {
		outPiece
		p *nn.Param
	}
	var pieces []statePiece
	for _, t := range opt.StateDict().Tensors {
		kind, param, ok := optimKind(t.Name)
		if !ok {
			return fmt.Errorf("checkpoint: optimizer state %q is not named optimizer.state.<kind>.<param>", t.Name)
		}
		p, ok := owned[param]
		if !ok {
			continue
		}
		if firstKind == "" {
			firstKind = kind
		}
		if kind == firstKind {
			covered[param] += t.Flat[1] - t.Flat[0]
		}
		if !w.tpFirst(p) {
			continue
		}
		pieces = append(pieces, statePiece{outPiece{name: t.Name, region: t.Region, flat: t.Flat, dtype: t.Tensor.DType(),
			shape: tensor.Shape{t.Tensor.Numel()}, t: t.Tensor}, p})
	}
	// The state of dense or expert parameters is sharded when this rank holds a part
	// of one of them, or none of it. Every parameter counts, the TP-replicated ones too:
	// (expert-)DP rank 0 holds the start of every bucket, so another rank of a sharded
	// optimizer always misses part of some parameter, if only a replicated one.
	var sharded [2]bool // dense, expert
	for name, p := range owned {
		if covered[name] != p.Numel() && firstKind != "" {
			sharded[b2i(p.Expert)] = true
		}
	}
	for _, sp := range pieces {
		if sharded[b2i(sp.p.Expert)] || w.dpFirst(sp.p) {
			d.optim = append(d.optim, sp.outPiece)
		}
	}
	d.sharded = sharded[0] || sharded[1]
	d.writeOptim = w.dp == 0 || sharded[0] || len(d.optim) > 0
	slices.SortFunc(d.optim, func(a, b outPiece) int { return cmp.Compare(a.name, b.name) })
	return nil
}

// b2i returns 1 for true, 0 for false.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// manifestOf returns the manifest fields that come from a rank's State (rank 0's are
// written).
func manifestOf(st *State) Manifest {
	m := Manifest{Format: manifestFormat, FormatVersion: FormatVersion, Version: megago.Version,
		Iteration: st.Iteration, ConsumedSamples: st.ConsumedSamples, Seed: st.Seed, Model: st.Model, Extra: st.Extra}
	if st.Optimizer != nil {
		m.Optimizer = st.Optimizer.StateDict().Scalars
	}
	return m
}

// Save writes st of every rank of mesh as iteration st.Iteration of the checkpoint
// directory dir and publishes it as the latest. Every rank calls it; ranks write their
// files in parallel, under a staging directory and temporary names, fsynced; once every
// rank has finished, rank 0 writes the manifest with each file's checksum, renames the
// staging directory to iter_NNNNNNN and replaces the tracker file atomically. An error or
// a crash on any rank before that leaves the previous checkpoint as the latest. An
// existing directory of the same iteration is replaced. Rank 0 locks dir for the
// duration of the save (see LockFile): while another job saves there, Save returns an
// error naming dir and that job's process id. It removes the staging directories that
// interrupted saves left, and a failed save removes its own.
func Save(ctx context.Context, dir string, mesh *parallel.Mesh, st *State) error {
	p, err := startSave(ctx, dir, mesh, st, false, nil)
	if err != nil {
		return err
	}
	return p.Commit(ctx)
}

// StartSave begins an asynchronous save: it copies this rank's state into host memory
// and writes it in the background, so training can go on (and change the parameters)
// meanwhile. Every rank must then call Commit, which waits for the writes and publishes
// the iteration as Save does; until then the previous checkpoint stays the latest. Rank 0
// holds dir's lock from StartSave until Commit returns. Call StartSave and Commit at the
// same point of the sequence of collectives on every rank.
func StartSave(ctx context.Context, dir string, mesh *parallel.Mesh, st *State) (*PendingSave, error) {
	return startSave(ctx, dir, mesh, st, true, nil)
}

// startSave collects the pieces, prepares the staging directory (rank 0) and writes this
// rank's files, in the background if async.
func startSave(ctx context.Context, dir string, mesh *parallel.Mesh, st *State, async bool, hook saveHook) (*PendingSave, error) {
	return startSaveAs(ctx, dir, mesh, st, async, hook, writersOf(mesh))
}

// startSaveAs is startSave with the rank's writers given.
func startSaveAs(ctx context.Context, dir string, mesh *parallel.Mesh, st *State, async bool, hook saveHook, w writers) (*PendingSave, error) {
	if err := checkState(st, mesh); err != nil {
		return nil, err
	}
	if st.Optimizer != nil { // the parameters must be whole (optim.Config.OverlapParamGather)
		if err := st.Optimizer.FinishParamGather(); err != nil {
			return nil, err
		}
	}
	d, err := collect(st, w)
	if err != nil {
		return nil, err
	}
	return begin(ctx, dir, mesh, st.Params[0].Device(), manifestOf(st), d, async, hook)
}

// checkState reports a State or mesh that cannot be saved.
func checkState(st *State, mesh *parallel.Mesh) error {
	switch {
	case st.Model.Arch == "":
		return fmt.Errorf("checkpoint: State.Model is not set")
	case len(st.Params) == 0:
		return fmt.Errorf("checkpoint: State has no parameters")
	case st.Iteration < 0 || st.ConsumedSamples < 0:
		return fmt.Errorf("checkpoint: iteration %d and consumed samples %d must be ≥ 0", st.Iteration, st.ConsumedSamples)
	}
	_, _, _, err := st.Model.vocab()
	return err
}
