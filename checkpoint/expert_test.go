package checkpoint

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/internal/experttest"
	"megago/nn"
	"megago/optim"
	"megago/parallel"
	"megago/tensor"
)

// Expert parallelism: the toy model of package experttest (dense and expert parameters,
// no MoE layer) trained on goroutine ranks, saved at one expert layout and loaded at
// others.

const (
	expertSaveAt = 2 // steps before the save
	expertSteps  = 4 // steps in all
	biasName     = "layers.0.mlp.router.expert_bias"
)

// expertGlobals are global tensors assembled from every rank's pieces.
type expertGlobals struct {
	mu     sync.Mutex
	params map[string][]float64 // parameters and the state tensor
	optim  map[string][]float64 // optimizer state, by state name
}

func newExpertGlobals() *expertGlobals {
	return &expertGlobals{params: map[string][]float64{}, optim: map[string][]float64{}}
}

// expertRank is one rank's toy model, state tensor and optimizer.
type expertRank struct {
	l     experttest.Layout
	rank  int
	mesh  *parallel.Mesh
	ps    []*nn.Param
	bias  *tensor.Tensor // [E] the state tensor, on stage 0
	opt   *optim.Optimizer
	st    *State
	model Model
}

func newExpertRank(ctx context.Context, world parallel.Comm, l experttest.Layout, distributed bool) (*expertRank, error) {
	g, err := l.Groups(ctx, world)
	if err != nil {
		return nil, err
	}
	mesh, err := parallel.NewMesh(ctx, world, parallel.Sizes{TP: l.TP, PP: l.PP, DP: l.DP})
	if err != nil {
		return nil, err
	}
	dev := tensor.NewCPU()
	c := l.Coord(world.Rank())
	r := &expertRank{l: l, rank: world.Rank(), mesh: mesh, ps: experttest.BuildAll(dev, tensor.F32, experttest.Model(l.PP), l, c)}
	r.opt, err = optim.New(r.ps, optim.Config{LR: 0.05, WeightDecay: 0.1, ClipGrad: 2, Distributed: distributed,
		BucketSize: 100, Groups: optim.Groups{TP: g.TP, MP: g.MP, DP: g.DP, ExpertTP: g.ExpertTP, ExpertDP: g.ExpertDP, ExpertMP: g.ExpertMP}})
	if err != nil {
		return nil, err
	}
	r.model = GPTModel(harnessConfig(false)) // a label: the toy parameters are no GPT's
	r.st = &State{Model: r.model, Params: r.ps, Optimizer: r.opt}
	if c.PP == 0 {
		r.bias = tensor.Zeros(dev, tensor.F32, experttest.Experts)
		r.st.Tensors = []nn.NamedTensor{{Name: biasName, Tensor: r.bias}}
	}
	return r, nil
}

// train runs steps [from, to).
func (r *expertRank) train(ctx context.Context, from, to int) error {
	for step := from; step < to; step++ {
		r.opt.ZeroGrad()
		experttest.SetGrads(r.ps, r.l, r.rank, step)
		if _, err := r.opt.Step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// writers returns the rank's writers under its expert layout.
func (r *expertRank) writers() writers {
	c := r.l.Coord(r.rank)
	return writers{tp: c.TP, dp: c.DP, etp: c.ETP, edp: c.EDP}
}

// record scatters the rank's parameters, state tensor and optimizer state into g.
func (r *expertRank) record(g *expertGlobals) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range r.ps {
		scatter(g.params, p.Name, p.Region(), [2]int{0, p.Numel()}, tensorF64(p.Tensor.Detach().Cast(tensor.F64)))
	}
	if r.bias != nil {
		g.params[biasName] = tensorF64(r.bias.Cast(tensor.F64))
	}
	for _, t := range r.opt.StateDict().Tensors {
		scatter(g.optim, t.Name, t.Region, t.Flat, tensorF64(t.Tensor.Cast(tensor.F64)))
	}
}

// finish records the rank into at, trains the steps from the save on and records it
// into end.
func (r *expertRank) finish(ctx context.Context, at, end *expertGlobals) error {
	r.record(at)
	if err := r.train(ctx, expertSaveAt, expertSteps); err != nil {
		return err
	}
	r.record(end)
	return nil
}

// modelFiles returns the names of a manifest's model files, sorted.
func modelFiles(m *Manifest) []string {
	var out []string
	for name, f := range m.Files {
		if f.Kind == KindModel {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// runExperts runs fn on every rank of l.
func runExperts(t *testing.T, l experttest.Layout, distributed bool, fn func(ctx context.Context, r *expertRank) error) {
	t.Helper()
	err := parallel.RunLocal(l.World(), func(world parallel.Comm) error {
		ctx := context.Background()
		r, err := newExpertRank(ctx, world, l, distributed)
		if err != nil {
			return err
		}
		return fn(ctx, r)
	})
	require.NoError(t, err, "%v", l)
}

// TestExpertCheckpointReshard saves the toy model at expert-parallel size 2 (with the
// distributed optimizer, with expert-TP 2, and with expert-TP 1 under TP 2) and loads it at expert-parallel sizes 1,
// 2 and 4 and other expert-TP sizes: every rank gets its part of the saved global
// parameters, state tensor and optimizer state, and the resumed training ends where
// training without stopping does, bit for bit (the gradients are exact, see
// experttest).
func TestExpertCheckpointReshard(t *testing.T) {
	one := experttest.Layout{TP: 1, PP: 1, DP: 1, ETP: 1, EP: 1}
	ep2 := experttest.Layout{TP: 1, PP: 1, DP: 4, ETP: 1, EP: 2}  // expert-DP 2
	etp2 := experttest.Layout{TP: 2, PP: 1, DP: 2, ETP: 2, EP: 2} // expert-DP 1
	ep4 := experttest.Layout{TP: 1, PP: 1, DP: 4, ETP: 1, EP: 4}  // expert-DP 1
	etp1 := experttest.Layout{TP: 2, PP: 1, DP: 2, ETP: 1, EP: 2} // expert-DP 2
	for _, save := range []struct {
		l           experttest.Layout
		distributed bool
		modelFiles  []string
	}{
		// Expert-DP rank 0 of EP rank 1 is DP rank 1: it writes a model file of its own.
		{ep2, true, []string{"model_tp00_pp000.safetensors", "model_tp00_pp000_dp001.safetensors"}},
		// EP rank 1 is DP rank 1 (TP 0 and 1).
		{etp2, false, []string{"model_tp00_pp000.safetensors", "model_tp00_pp000_dp001.safetensors",
			"model_tp01_pp000.safetensors", "model_tp01_pp000_dp001.safetensors"}},
		// EP rank 1 is TP rank 1; expert-DP rank 1 (DP rank 1) writes nothing.
		{etp1, true, []string{"model_tp00_pp000.safetensors", "model_tp01_pp000.safetensors"}},
	} {
		dir := t.TempDir()
		saved, straight := newExpertGlobals(), newExpertGlobals()
		runExperts(t, save.l, save.distributed, func(ctx context.Context, r *expertRank) error {
			if err := r.train(ctx, 0, expertSaveAt); err != nil {
				return err
			}
			if r.bias != nil {
				r.bias.CopyFrom(tensor.FromSlice(r.bias.Device(), []float32{0.5, -0.25, 1, 2}))
			}
			r.st.Iteration = expertSaveAt
			p, err := startSaveAs(ctx, dir, r.mesh, r.st, false, nil, r.writers())
			if err == nil {
				err = p.Commit(ctx)
			}
			if err != nil {
				return err
			}
			return r.finish(ctx, saved, straight)
		})
		m, err := ReadManifest(dir + "/" + IterDir(expertSaveAt))
		require.NoError(t, err)
		require.Equal(t, save.modelFiles, modelFiles(m))
		require.Equal(t, save.distributed, m.Layout.DistributedOptimizer)

		for _, load := range []struct {
			l           experttest.Layout
			distributed bool
		}{{one, false}, {ep2, false}, {ep4, true}, {etp2, true}, {etp1, false}} {
			t.Run(fmt.Sprintf("save-%v-load-%v-distributed-%v", save.l, load.l, load.distributed), func(t *testing.T) {
				loaded, resumed := newExpertGlobals(), newExpertGlobals()
				runExperts(t, load.l, load.distributed, func(ctx context.Context, r *expertRank) error {
					if _, err := Load(ctx, dir, r.mesh, r.st, LoadOptions{}); err != nil {
						return err
					}
					return r.finish(ctx, loaded, resumed)
				})
				require.Equal(t, saved.params, loaded.params, "parameters and state tensor loaded")
				require.Equal(t, saved.optim, loaded.optim, "optimizer state loaded")
				require.Equal(t, straight.params, resumed.params, "parameters after resuming")
				require.Equal(t, straight.optim, resumed.optim, "optimizer state after resuming")
			})
		}
	}
}

// TestStateTensors: a module's state tensor (nn.Stateful), held by every rank of the
// last pipeline stage, is saved once, kept by the offline Reshard (written whole by
// rank 0) and loaded into every rank holding it, at both layouts.
func TestStateTensors(t *testing.T) {
	const name = "layers.1.mlp.router.expert_bias"
	want := []float64{0.5, -0.25, 1, 2}
	src := layout{tp: 2, pp: 2, dp: 1, tied: true}
	dir, out := t.TempDir(), t.TempDir()
	with := func(r *rig, vals []float64) {
		if r.mesh.IsLastStage() {
			r.st.Tensors = []nn.NamedTensor{{Name: name, Tensor: tensor.FromSlice(r.st.Params[0].Device(), vals)}}
		}
	}
	runLayout(t, src, func(ctx context.Context, r *rig) error {
		with(r, want)
		return Save(ctx, dir, r.mesh, r.st)
	})
	if _, err := Reshard(context.Background(), dir, out, WriteOptions{TP: 1, PP: 1}); err != nil {
		t.Fatal(err)
	}
	_, global, err := ReadGlobal(out, 0)
	require.NoError(t, err)
	require.Equal(t, want, tensorF64(global[name]), "kept by Reshard")
	for _, from := range []string{dir, out} {
		runLayout(t, src, func(ctx context.Context, r *rig) error {
			with(r, make([]float64, len(want)))
			if _, err := Load(ctx, from, r.mesh, r.st, LoadOptions{}); err != nil {
				return err
			}
			if r.mesh.IsLastStage() {
				if got := tensorF64(r.st.Tensors[0].Tensor); !slices.Equal(got, want) {
					return fmt.Errorf("rank %d loaded %v from %s, want %v", r.mesh.Rank(), got, from, want)
				}
			}
			return nil
		})
	}
}
