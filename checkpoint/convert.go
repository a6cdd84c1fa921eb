package checkpoint

import (
	"context"
	"fmt"
	"slices"
	"sync"

	megago "megago"
	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// Offline conversions: reading a checkpoint's global tensors, and writing a checkpoint
// at another layout from a checkpoint or from global tensors, with in-process ranks.

// ReadGlobal returns the manifest of iteration it of the checkpoint in dir (0: the latest)
// and every model parameter assembled whole, at its saved global shape (vocabulary padded
// as at the saved TP), on the CPU.
func ReadGlobal(dir string, it int) (*Manifest, map[string]*tensor.Tensor, error) {
	if it <= 0 {
		it = -1
	}
	idir, _, err := iterationDir(dir, it)
	if err != nil {
		return nil, nil, err
	}
	m, err := ReadManifest(idir)
	if err != nil {
		return nil, nil, err
	}
	src, err := openSource(idir, m, KindModel, true)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer src.close()
	dev := tensor.NewCPU()
	out := map[string]*tensor.Tensor{}
	for _, name := range src.names() {
		dt, shape, b, err := src.global(name)
		if err != nil {
			return nil, nil, fmt.Errorf("checkpoint: %s: %w", idir, err)
		}
		out[name] = fromBytes(dev, dt, shape, b)
	}
	return m, out, nil
}

// WriteOptions describe a checkpoint written by Reshard or WriteGlobal.
type WriteOptions struct {
	// TP and PP are the layout to write (0 means 1); DP is 1.
	TP, PP int
	// Iteration selects the source iteration of Reshard (0: the latest).
	Iteration int
}

func (o WriteOptions) sizes() parallel.Sizes {
	return parallel.Sizes{TP: max(o.TP, 1), CP: 1, PP: max(o.PP, 1), DP: 1}
}

// Reshard writes the checkpoint in src as a checkpoint in dst at the layout of opts,
// optimizer state included (per parameter, as a non-distributed optimizer at DP = 1
// holds it; any layout loads it). The iteration, data position, seed and scalars are
// kept.
func Reshard(ctx context.Context, src, dst string, opts WriteOptions) (*Manifest, error) {
	it := opts.Iteration
	if it <= 0 {
		it = -1
	}
	idir, _, err := iterationDir(src, it)
	if err != nil {
		return nil, err
	}
	m, err := ReadManifest(idir)
	if err != nil {
		return nil, err
	}
	model, err := openSource(idir, m, KindModel, true)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer model.close()
	var optim *source
	if m.Optimizer != nil {
		if optim, err = openSource(idir, m, KindOptimizer, true); err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		defer optim.close()
	}
	man := *m
	man.FormatVersion, man.Version, man.Files, man.Layout = FormatVersion, megago.Version, nil, Layout{}
	return writeLayout(ctx, dst, man, model, optim, opts.sizes())
}

// WriteGlobal writes the global parameters of model m (megago's names, any vocabulary
// padding; from ImportHF, ImportMegatron or ReadGlobal) as a weights-only checkpoint of
// iteration it in dir, at the layout of opts. consumed is the data position to record.
func WriteGlobal(ctx context.Context, dir string, m Model, global map[string]*tensor.Tensor, it, consumed int, opts WriteOptions) (*Manifest, error) {
	man := Manifest{Format: manifestFormat, FormatVersion: FormatVersion, Version: megago.Version, Iteration: it,
		ConsumedSamples: consumed, Model: m}
	return writeLayout(ctx, dir, man, memSource(global), nil, opts.sizes())
}

// writeLayout writes a checkpoint of model (and optim, if not nil) pieces at sizes, one
// goroutine rank per TP × PP rank, each building its part of the model to learn its
// parameters' regions (expert parameters at expert-parallel size 1, split over
// expert-TP = TP as in a training run at that TP). Model tensors
// that are no rank's parameter (state tensors, nn.Stateful) are written whole by rank 0.
func writeLayout(ctx context.Context, dir string, man Manifest, model, optim *source, sizes parallel.Sizes) (*Manifest, error) {
	vocab, vocabNames, err := vocabOf(man.Model)
	if err != nil {
		return nil, err
	}
	if err := man.Model.checkSize(model.elements(), "the tensors of the checkpoint's model files"); err != nil {
		return nil, err
	}
	var kinds []string
	for _, s := range []*source{model, optim} {
		if s != nil {
			if err := s.prepare(); err != nil {
				return nil, fmt.Errorf("checkpoint: %w", err)
			}
		}
	}
	if optim != nil {
		for _, name := range optim.names() {
			if kind, _, ok := optimKind(name); ok && !slices.Contains(kinds, kind) {
				kinds = append(kinds, kind)
			}
		}
	}
	var mu sync.Mutex
	claimed := map[string]bool{} // every rank's parameters
	err = parallel.RunLocal(sizes.World(), func(world parallel.Comm) error {
		mesh, err := parallel.NewMesh(ctx, world, sizes)
		if err != nil {
			return err
		}
		dev := tensor.NewCPU()
		b := &nn.Builder{Dev: dev, DType: tensor.F32, RNG: tensor.NewRNG(0), TP: mesh.TP(), Experts: nn.MeshExperts(mesh)}
		parts, err := man.Model.Build(b, mesh)
		if err != nil {
			return err
		}
		mu.Lock()
		for _, p := range parts.Params() {
			claimed[p.Name] = true
		}
		mu.Unlock()
		d := rankData{writeModel: true, writeOptim: optim != nil}
		w := writersOf(mesh)
		for _, p := range parts.Params() {
			if p.Shared || !w.tpFirst(p) {
				continue
			}
			if err := d.addParam(p, model, optim, kinds, vocab, vocabNames); err != nil {
				return err
			}
		}
		if err := world.Barrier(ctx); err != nil {
			return err
		}
		if world.Rank() == 0 { // state tensors (nn.Stateful), no rank's parameters: whole
			for _, name := range model.names() {
				if !claimed[name] {
					dt, shape, raw, err := model.global(name)
					if err != nil {
						return fmt.Errorf("checkpoint: %w", err)
					}
					d.model = append(d.model, outPiece{name: name, region: tensor.Whole(shape...), flat: [2]int{0, shape.Numel()},
						dtype: dt, shape: shape, raw: raw})
				}
			}
		}
		pending, err := begin(ctx, dir, mesh, dev, man, d, false, nil)
		if err != nil {
			return err
		}
		return pending.Commit(ctx)
	})
	if err != nil {
		return nil, err
	}
	idir, _, err := iterationDir(dir, man.Iteration)
	if err != nil {
		return nil, err
	}
	return ReadManifest(idir)
}

// addParam adds parameter p's piece, assembled from model, and its optimizer state of
// kinds from optim, to d.
func (d *rankData) addParam(p *nn.Param, model, optim *source, kinds []string, vocab int, vocabNames map[string]bool) error {
	w := want{name: p.Name, region: p.Region(), flat: [2]int{0, p.Numel()}}
	if vocabNames[p.Name] {
		w.vocab = vocab
	}
	dt, raw, err := model.assemble(w)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	d.model = append(d.model, outPiece{name: p.Name, region: w.region, flat: w.flat, dtype: dt, shape: p.Shape().Clone(), raw: raw})
	for _, kind := range kinds {
		w.name = optimPrefix + kind + "." + p.Name
		if _, ok := optim.pieces[w.name]; !ok && kind == "fp32_param" {
			continue
		}
		dt, raw, err := optim.assemble(w)
		if err != nil {
			return fmt.Errorf("checkpoint: optimizer state: %w", err)
		}
		d.optim = append(d.optim, outPiece{name: w.name, region: w.region, flat: w.flat, dtype: dt, shape: tensor.Shape{p.Numel()}, raw: raw})
	}
	return nil
}

// elements returns the number of elements the source's pieces hold.
func (s *source) elements() int64 {
	var n int64
	for _, ps := range s.pieces {
		for _, p := range ps {
			n += int64(p.flat[1] - p.flat[0])
		}
	}
	return n
}

// prepare builds the run index of every tensor, after which the source is only read
// (and may be shared by goroutines).
func (s *source) prepare() error {
	for _, name := range s.names() {
		if _, err := s.runsOf(name); err != nil {
			return err
		}
	}
	return nil
}
