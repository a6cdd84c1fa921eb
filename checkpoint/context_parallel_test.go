package checkpoint

import (
	"context"
	"math"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/parallel"
)

// TestReplicaIsDPCPRank: the rank's replica, which names its files and chooses the
// writers of dense pieces, is its rank in the mesh's DP × CP group.
func TestReplicaIsDPCPRank(t *testing.T) {
	sizes := parallel.Sizes{TP: 2, CP: 2, PP: 2, DP: 2}
	err := parallel.RunLocal(16, func(world parallel.Comm) error {
		mesh, err := parallel.NewMesh(context.Background(), world, sizes)
		if err != nil {
			return err
		}
		if got, want := replica(mesh.Sizes(), mesh.Coord()), mesh.DPCP().Rank(); got != want {
			t.Errorf("rank %d (%v): replica %d, DP × CP rank %d", world.Rank(), mesh.Coord(), got, want)
		}
		return nil
	})
	require.NoError(t, err)
}

// Checkpoints are context-parallel-agnostic: CP ranks hold the same parameters, so a
// checkpoint saved at CP = 2 (after training, with the distributed optimizer sharding
// its state over DP × CP, or without it) loads at CP = 1 with the same parameters and
// optimizer state bit for bit, and the reverse; the manifest records CP and every rank's
// files have names of their own.
func TestCheckpointAcrossCP(t *testing.T) {
	const saved = 2 // iterations before the save
	for _, tc := range []struct {
		name       string
		save, load layout
		wantFiles  []string
		wantCP     int
	}{
		{"cp2 to cp1", layout{tp: 1, pp: 1, dp: 1, cp: 2, distributed: true}, layout{tp: 1, pp: 1, dp: 1},
			[]string{"model_tp00_pp000.safetensors", "optim_tp00_pp000_dp000.safetensors", "optim_tp00_pp000_dp001.safetensors"}, 2},
		{"cp2 dp2 to cp1", layout{tp: 1, pp: 1, dp: 2, cp: 2}, layout{tp: 1, pp: 1, dp: 1},
			[]string{"model_tp00_pp000.safetensors", "optim_tp00_pp000_dp000.safetensors"}, 2},
		{"cp1 to cp2", layout{tp: 1, pp: 1, dp: 1}, layout{tp: 1, pp: 1, dp: 1, cp: 2, distributed: true},
			[]string{"model_tp00_pp000.safetensors", "optim_tp00_pp000_dp000.safetensors"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var mu sync.Mutex
			want, got := map[string][]float64{}, map[string][]float64{}
			runLayout(t, tc.save, func(ctx context.Context, r *rig) error {
				for it := range saved {
					if _, err := r.step(ctx, it); err != nil {
						return err
					}
				}
				r.params(want, &mu)
				r.optimState(want, &mu)
				return Save(ctx, dir, r.mesh, r.st)
			})
			runLayout(t, tc.load, func(ctx context.Context, r *rig) error {
				m, err := Load(ctx, dir, r.mesh, r.st, LoadOptions{})
				if err != nil {
					return err
				}
				if r.mesh.Rank() == 0 {
					files := make([]string, 0, len(m.Files))
					for f := range m.Files {
						files = append(files, f)
					}
					sort.Strings(files)
					if !slices.Equal(files, tc.wantFiles) || m.Layout.CP != tc.wantCP || r.st.Iteration != saved {
						t.Errorf("manifest: files %v, CP %d, iteration %d; want %v, CP %d, iteration %d",
							files, m.Layout.CP, r.st.Iteration, tc.wantFiles, tc.wantCP, saved)
					}
				}
				r.params(got, &mu)
				r.optimState(got, &mu)
				return nil
			})
			require.NotEmpty(t, want)
			require.Len(t, got, len(want))
			for name, w := range want {
				if g := got[name]; !slices.EqualFunc(w, g, func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }) {
					t.Errorf("%s differs after loading (max rel diff %g)", name, maxRelDiff(g, w))
				}
			}
		})
	}
}

// optimState adds the global values of the optimizer state this rank holds (its shard
// under the distributed optimizer) to into, by state name.
func (r *rig) optimState(into map[string][]float64, mu *sync.Mutex) {
	mu.Lock()
	defer mu.Unlock()
	for _, st := range r.tr.Optimizer().StateDict().Tensors {
		scatter(into, st.Name, st.Region, st.Flat, tensorF64(st.Tensor))
	}
}
