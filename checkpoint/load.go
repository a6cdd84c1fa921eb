package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"

	"megago/nn"
	"megago/optim"
	"megago/parallel"
	"megago/tensor"
)

// LoadOptions says what Load reads.
type LoadOptions struct {
	// Iteration is the iteration to load; 0 means the latest (the tracker file's).
	Iteration int
	// WeightsOnly loads the model parameters only (fine-tuning from a checkpoint):
	// the optimizer, Iteration, ConsumedSamples, Seed and Extra of the State are left
	// as they are.
	WeightsOnly bool
	// NoVerify skips checking the files read against the manifest's SHA-256 checksums.
	NoVerify bool
}

// Load restores st on every rank of mesh from the checkpoint directory dir, resharding
// as needed: the checkpoint may have been saved at any TP, PP and DP, with or without the
// distributed optimizer, and with another vocabulary padding (the rows both paddings
// have are copied, further rows are zero). Each rank reads only the files holding parts
// of its parameters and optimizer state, and checks each against its checksum before
// writing anything. The model must be compatible (Model.Compatible) and every parameter,
// state tensor and optimizer state tensor of st must be fully present. Expert parameters
// are found by their region like any other (Param.Region includes the expert-parallel
// split), so the expert-parallel and expert-TP sizes may differ too. Every rank calls Load; it
// returns the manifest on success, and an error on every rank if any rank failed, in
// which case the other ranks' st may have been loaded.
func Load(ctx context.Context, dir string, mesh *parallel.Mesh, st *State, opts LoadOptions) (*Manifest, error) {
	if len(st.Params) == 0 {
		return nil, fmt.Errorf("checkpoint: State has no parameters")
	}
	m, err := loadRank(dir, st, opts)
	ok, cerr := allOK(ctx, mesh.World(), st.Params[0].Device(), err == nil)
	switch {
	case err != nil:
		return nil, err
	case cerr != nil:
		return nil, fmt.Errorf("checkpoint: loading: %w", cerr)
	case !ok:
		return nil, fmt.Errorf("checkpoint: loading %s failed on another rank (see its error)", dir)
	}
	return m, nil
}

// loadRank loads this rank's part of st: it finds every piece and verifies every file
// it needs, and only then writes, straight from the mapped files into the parameters and
// the optimizer's state.
func loadRank(dir string, st *State, opts LoadOptions) (*Manifest, error) {
	m, idir, err := openIteration(dir, opts.Iteration, st.Model)
	if err != nil {
		return nil, err
	}
	withOptim := st.Optimizer != nil && !opts.WeightsOnly
	if withOptim && m.Optimizer == nil {
		return nil, fmt.Errorf("checkpoint: %s has no optimizer state (saved weights only); load it with WeightsOnly", idir)
	}
	l, err := planLoad(idir, m, st, withOptim, !opts.NoVerify)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: loading %s: %w", filepath.Base(idir), err)
	}
	defer l.close()
	if err := l.write(st); err != nil {
		return nil, fmt.Errorf("checkpoint: loading %s: %w", filepath.Base(idir), err)
	}
	if !opts.WeightsOnly {
		st.Iteration, st.ConsumedSamples, st.Seed, st.Extra = m.Iteration, m.ConsumedSamples, m.Seed, m.Extra
	}
	return m, nil
}

// openIteration reads the manifest of iteration it of dir (0: the latest) and checks
// that it holds a model compatible with model.
func openIteration(dir string, it int, model Model) (*Manifest, string, error) {
	if it <= 0 {
		it = -1
	}
	idir, it, err := iterationDir(dir, it)
	if err != nil {
		return nil, "", err
	}
	m, err := ReadManifest(idir)
	if err != nil {
		return nil, "", err
	}
	if m.Iteration != it {
		return nil, "", fmt.Errorf("checkpoint: %s holds iteration %d, not %d", idir, m.Iteration, it)
	}
	if err := m.Model.Compatible(model); err != nil {
		return nil, "", fmt.Errorf("%w (%s)", err, idir)
	}
	return m, idir, nil
}

// loadPlan is what one rank reads: the pieces of its parameters and optimizer state, and
// the sources holding them.
type loadPlan struct {
	model, optim *source
	params       []want              // one per State.Params
	tensors      []want              // one per State.Tensors
	states       []optim.StateTensor // the optimizer's live state
	stateWants   []want              // one per state; naming a parameter: master weights from the model
	scalars      map[string]float64
}

// planLoad opens the sources, finds every piece, and maps and verifies the files
// needed, all of them in parallel.
func planLoad(idir string, m *Manifest, st *State, withOptim, verify bool) (*loadPlan, error) {
	vocab, vocabNames, err := vocabOf(st.Model)
	if err != nil {
		return nil, err
	}
	l := &loadPlan{scalars: m.Optimizer}
	if l.model, err = openSource(idir, m, KindModel, verify); err != nil {
		return nil, err
	}
	for _, p := range st.Params {
		w := want{name: p.Name, region: p.Region(), flat: [2]int{0, p.Numel()}}
		if vocabNames[p.Name] {
			w.vocab = vocab
		}
		l.params = append(l.params, w)
	}
	for _, t := range st.Tensors {
		l.tensors = append(l.tensors, want{name: t.Name, region: tensor.Whole(t.Tensor.Shape()...), flat: [2]int{0, t.Tensor.Numel()}})
	}
	if err := l.check(l.model, append(slices.Clip(l.params), l.tensors...)); err != nil {
		return nil, err
	}
	if withOptim {
		if l.optim, err = openSource(idir, m, KindOptimizer, verify); err != nil {
			l.close()
			return nil, err
		}
		l.states = st.Optimizer.StateDict().Tensors
		for _, t := range l.states {
			kind, param, _ := optimKind(t.Name)
			w := want{name: t.Name, region: t.Region, flat: t.Flat}
			if vocabNames[param] {
				w.vocab = vocab
			}
			if _, ok := l.optim.pieces[t.Name]; !ok && kind == "fp32_param" {
				w.name = param // saved with F32 parameters: their values are the master weights
			}
			l.stateWants = append(l.stateWants, w)
			if err := l.check(l.sourceOf(w, t), []want{w}); err != nil {
				return nil, fmt.Errorf("optimizer state: %w", err)
			}
		}
	}
	if err := fetch(l.model, l.optim); err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

// check verifies that src holds every piece of ws, and marks the files holding them as
// needed (see source.fetch); on error it closes the plan.
func (l *loadPlan) check(src *source, ws []want) error {
	for _, w := range ws {
		if _, err := src.segments(w, nil); err != nil {
			l.close()
			return err
		}
	}
	return nil
}

// sourceOf returns the source of state t's want w.
func (l *loadPlan) sourceOf(w want, t optim.StateTensor) *source {
	if w.name != t.Name {
		return l.model
	}
	return l.optim
}

// write copies the pieces into the parameters and the optimizer. The optimizer first
// checks the saved scalars (step, loss scaler, schedule) against its configuration and
// takes them; its state tensors are then filled in place.
func (l *loadPlan) write(st *State) error {
	if l.optim != nil {
		if err := st.Optimizer.Load(&optim.State{Tensors: l.states, Scalars: l.scalars}); err != nil {
			return err
		}
	}
	for i, p := range st.Params {
		if err := l.model.writeInto(l.params[i], p.Tensor); err != nil {
			return err
		}
	}
	for i, t := range st.Tensors {
		if err := l.model.writeInto(l.tensors[i], t.Tensor); err != nil {
			return err
		}
	}
	for i, t := range l.states {
		if err := l.sourceOf(l.stateWants[i], t).writeInto(l.stateWants[i], t.Tensor); err != nil {
			return err
		}
	}
	return nil
}

// close releases the plan's files.
func (l *loadPlan) close() {
	for _, s := range []*source{l.model, l.optim} {
		if s != nil {
			s.close()
		}
	}
}

// fetch maps and verifies the needed files of the sources (nil ones skipped), all in
// parallel.
func fetch(srcs ...*source) error {
	errs := make([]error, len(srcs))
	var wg sync.WaitGroup
	for i, s := range srcs {
		if s != nil {
			wg.Go(func() { errs[i] = s.fetch() })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// vocabOf returns a model's vocabulary and the set of its vocabulary-padded parameters.
func vocabOf(m Model) (int, map[string]bool, error) {
	v, _, names, err := m.vocab()
	set := map[string]bool{}
	for _, n := range names {
		set[n] = true
	}
	return v, set, err
}

// SetParams sets every parameter of ps (one rank's, at any TP layout) to its part of the
// global tensor of the same name, as nn.LoadGlobal does, but from tensors on any device
// and with any vocabulary padding of model m (the rows both have are copied, further
// rows are zero). It is how weights from ImportHF, ImportMegatron or ReadGlobal reach a
// model. It checks every tensor before setting any.
func SetParams(ps []*nn.Param, m Model, global map[string]*tensor.Tensor) error {
	vocab, names, err := vocabOf(m)
	if err != nil {
		return err
	}
	ws, ts := make([]want, len(ps)), make([]*tensor.Tensor, len(ps))
	for i, p := range ps {
		ws[i], ts[i] = want{name: p.Name, region: p.Region(), flat: [2]int{0, p.Numel()}}, p.Tensor
		if names[p.Name] {
			ws[i].vocab = vocab
		}
	}
	return setWants("SetParams", memSource(global), ws, ts)
}

// SetState sets every state tensor of ts (a model's nn.ModuleState: the routers' expert
// biases) to the global tensor of the same name, as SetParams sets parameters. It
// checks every tensor before setting any.
func SetState(ts []nn.NamedTensor, global map[string]*tensor.Tensor) error {
	ws, into := make([]want, len(ts)), make([]*tensor.Tensor, len(ts))
	for i, t := range ts {
		ws[i], into[i] = want{name: t.Name, region: tensor.Whole(t.Tensor.Shape()...), flat: [2]int{0, t.Tensor.Numel()}}, t.Tensor
	}
	return setWants("SetState", memSource(global), ws, into)
}

// setWants copies each want of src into the tensor beside it, after checking that src
// holds all of them; fn names the caller in errors.
func setWants(fn string, src *source, ws []want, into []*tensor.Tensor) error {
	for _, w := range ws {
		if _, err := src.segments(w, nil); err != nil {
			return fmt.Errorf("checkpoint: %s: %w", fn, err)
		}
	}
	for i, w := range ws {
		if err := src.writeInto(w, into[i]); err != nil {
			return fmt.Errorf("checkpoint: %s: %w", fn, err)
		}
	}
	return nil
}
