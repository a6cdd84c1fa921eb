package parallel_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/parallel"
	"megago/tensor"
)

// meshGroupReport is what a rank saw of one of its mesh groups.
type meshGroupReport struct {
	name    string
	members []int // world ranks, in group-rank order
	rank    int   // this rank's rank in the group
	sums    []float32
}

// meshProbe records c's membership and all-reduces [1, world rank] over it, which gives
// [group size, sum of its members' world ranks] when the group is the one it claims.
func meshProbe(ctx context.Context, c parallel.Comm) (meshGroupReport, error) {
	if c == nil {
		return meshGroupReport{}, nil
	}
	rep := meshGroupReport{name: c.Name(), rank: c.Rank()}
	for i := range c.Size() {
		rep.members = append(rep.members, c.WorldRank(i))
	}
	x := tensor.FromSlice(tensor.NewCPU(), []float32{1, float32(c.WorldRank(c.Rank()))})
	if err := c.AllReduce(ctx, x, parallel.Sum); err != nil {
		return rep, err
	}
	rep.sums = tensor.ToSlice[float32](x)
	return rep, nil
}

// meshAccessor names a Mesh accessor.
type meshAccessor struct {
	name string
	comm func(m *parallel.Mesh) parallel.Comm
}

var meshAccessors = []meshAccessor{
	{"world", (*parallel.Mesh).World},
	{"tp", (*parallel.Mesh).TP},
	{"cp", (*parallel.Mesh).CP},
	{"dp", (*parallel.Mesh).DP},
	{"dp-cp", (*parallel.Mesh).DPCP},
	{"pp", (*parallel.Mesh).PP},
	{"mp", (*parallel.Mesh).MP},
	{"embedding", (*parallel.Mesh).Embedding},
}

// meshExpertAccessors are the expert groups' accessors.
var meshExpertAccessors = []meshAccessor{
	{"ep", (*parallel.Mesh).EP},
	{"etp", (*parallel.Mesh).ExpertTP},
	{"etp-ep", (*parallel.Mesh).ExpertTPEP},
	{"edp", (*parallel.Mesh).ExpertDP},
	{"emp", (*parallel.Mesh).ExpertMP},
}

// buildMeshes builds a Mesh with sizes s on every rank of RunLocal(n) and returns each
// rank's mesh and a probe of each of its groups (indexed like meshAccessors, then
// meshExpertAccessors).
func buildMeshes(t *testing.T, n int, s parallel.Sizes) ([]*parallel.Mesh, [][]meshGroupReport) {
	t.Helper()
	ctx := context.Background()
	meshes := make([]*parallel.Mesh, n)
	reports := make([][]meshGroupReport, n)
	err := parallel.RunLocal(n, func(world parallel.Comm) error {
		m, err := parallel.NewMesh(ctx, world, s)
		if err != nil {
			return err
		}
		r := world.Rank()
		meshes[r] = m
		for _, g := range slices.Concat(meshAccessors, meshExpertAccessors) {
			rep, err := meshProbe(ctx, g.comm(m))
			if err != nil {
				return fmt.Errorf("probing %s: %w", g.name, err)
			}
			reports[r] = append(reports[r], rep)
		}
		return nil
	})
	require.NoError(t, err)
	return meshes, reports
}

// meshGroupOf returns the group of groups that holds rank, or nil.
func meshGroupOf(groups [][]int, rank int) []int {
	for _, g := range groups {
		if slices.Contains(g, rank) {
			return g
		}
	}
	return nil
}

// checkMeshReport compares a rank's probe of a group with the members it should have.
func checkMeshReport(t *testing.T, rank int, name string, rep meshGroupReport, want []int) {
	t.Helper()
	if want == nil {
		assert.Nil(t, rep.members, "rank %d: %s group should be nil", rank, name)
		return
	}
	sum := 0
	for _, r := range want {
		sum += r
	}
	assert.Equal(t, name, rep.name, "rank %d", rank)
	assert.Equal(t, want, rep.members, "rank %d: %s members", rank, name)
	assert.Equal(t, slices.Index(want, rank), rep.rank, "rank %d: rank in %s", rank, name)
	assert.Equal(t, []float32{float32(len(want)), float32(sum)}, rep.sums, "rank %d: all-reduce over %s", rank, name)
}

// TestMeshLocalMegatronExample builds Megatron's 16-rank TP=2, PP=4 example on goroutine
// ranks and checks every group Comm against the hand-written table.
func TestMeshLocalMegatronExample(t *testing.T) {
	ex := megatron16
	meshes, reports := buildMeshes(t, 16, parallel.Sizes{TP: 2, PP: 4})
	all := [][]int{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}}
	tables := map[string][][]int{"world": all, "tp": ex.tp, "cp": ex.cp, "dp": ex.dp,
		"dp-cp": ex.dpcp, "pp": ex.pp, "mp": ex.mp, "embedding": ex.emb}
	for r, m := range meshes {
		assert.Equal(t, ex.sizes, m.Sizes())
		assert.Equal(t, r, m.Rank())
		for i, g := range meshAccessors {
			checkMeshReport(t, r, g.name, reports[r][i], meshGroupOf(tables[g.name], r))
		}
	}
	// The AllReduce(sum) of ones that the issue names: TP gives 2, PP 4, DP 2.
	for i, g := range meshAccessors {
		want := map[string]float32{"tp": 2, "pp": 4, "dp": 2}[g.name]
		if want != 0 {
			assert.Equal(t, want, reports[0][i].sums[0], "sum of ones over %s", g.name)
		}
	}
}

func TestMeshLocalStages(t *testing.T) {
	meshes, _ := buildMeshes(t, 16, parallel.Sizes{TP: 2, PP: 4})
	type stages struct {
		first, last bool
		next        int
		nextOK      bool
		prev        int
		prevOK      bool
	}
	// By pipeline stage, from the ring 0 → 1 → 2 → 3 → 0.
	want := []stages{
		{first: true, next: 1, nextOK: true, prev: 3, prevOK: false},
		{next: 2, nextOK: true, prev: 0, prevOK: true},
		{next: 3, nextOK: true, prev: 1, prevOK: true},
		{last: true, next: 0, nextOK: false, prev: 2, prevOK: true},
	}
	for r, m := range meshes {
		var got stages
		got.first, got.last = m.IsFirstStage(), m.IsLastStage()
		got.next, got.nextOK = m.NextStage()
		got.prev, got.prevOK = m.PrevStage()
		stage := slices.Index(meshGroupOf(megatron16.pp, r), r) // from the hand-written table
		assert.Equal(t, want[stage], got, "rank %d", r)
		assert.Equal(t, m.Coord().PP, m.PP().Rank(), "rank %d: PP group rank is the stage", r)
		assert.Equal(t, m.Embedding() != nil, m.IsFirstStage() || m.IsLastStage(), "rank %d", r)
	}
	assert.Equal(t, "rank 13 of 16 (TP=2 CP=1 PP=4 DP=2) at tp=1 cp=0 dp=0 pp=3", meshes[13].String())
}

func TestMeshLocalOneStage(t *testing.T) {
	meshes, _ := buildMeshes(t, 2, parallel.Sizes{})
	for _, m := range meshes {
		assert.True(t, m.IsFirstStage() && m.IsLastStage())
		next, ok := m.NextStage()
		assert.Equal(t, 0, next)
		assert.False(t, ok, "no next stage when PP = 1")
		require.NotNil(t, m.Embedding(), "PP = 1: every rank holds the tied embedding")
		assert.Equal(t, 1, m.Embedding().Size())
	}
}

// TestMeshLocalWithCP builds 24 ranks with TP=2, CP=3, PP=2 (DP=2) and checks each group
// Comm against the pure rank arithmetic, which TestMeshProperties checks on its own.
func TestMeshLocalWithCP(t *testing.T) {
	s := parallel.Sizes{TP: 2, CP: 3, PP: 2, DP: 2, EP: 1, ETP: 2}
	meshes, reports := buildMeshes(t, 24, parallel.Sizes{TP: 2, CP: 3, PP: 2})
	axes := map[string][]parallel.Axis{
		"world": meshAllAxes,
		"tp":    {parallel.AxisTP},
		"cp":    {parallel.AxisCP},
		"dp":    {parallel.AxisDP},
		"dp-cp": {parallel.AxisDP, parallel.AxisCP},
		"pp":    {parallel.AxisPP},
		"mp":    {parallel.AxisTP, parallel.AxisPP},
	}
	for r, m := range meshes {
		assert.Equal(t, s, m.Sizes())
		assert.Equal(t, s.Coord(r), m.Coord())
		for i, g := range meshAccessors {
			want := meshGroupOf(s.EmbeddingGroups(), r)
			if g.name != "embedding" {
				want = s.GroupRanks(r, axes[g.name]...)
			}
			checkMeshReport(t, r, g.name, reports[r][i], want)
		}
	}
}

func TestMeshLocalTPSlice(t *testing.T) {
	meshes, _ := buildMeshes(t, 8, parallel.Sizes{TP: 4})
	// A dimension of 12 split over tp 4: each TP rank's slice, by tp coordinate.
	want := [][2]int{{0, 3}, {3, 3}, {6, 3}, {9, 3}}
	for r, m := range meshes {
		start, size := m.TPSlice(12)
		assert.Equal(t, want[m.Coord().TP], [2]int{start, size}, "rank %d", r)
	}
	assert.PanicsWithValue(t, "parallel: TPSlice: size 10 not divisible by tp 4", func() { meshes[0].TPSlice(10) })
}

// TestMeshLocalSampleOffset checks SampleOffset against a simulation of Megatron's
// pretraining sampler: the global batch is read in chunks of mbs·DP indices, one chunk per
// microbatch, and DP rank r takes chunk[r·mbs : (r+1)·mbs].
func TestMeshLocalSampleOffset(t *testing.T) {
	const mbs, numMicro = 3, 4
	meshes, _ := buildMeshes(t, 16, parallel.Sizes{TP: 2, PP: 2}) // DP = 4
	dp := meshes[0].Sizes().DP
	batch := make([]int, mbs*dp*numMicro) // sample indices of one global batch, in order
	for i := range batch {
		batch[i] = i
	}
	covered := make([]int, len(batch))
	for r, m := range meshes {
		for micro := range numMicro {
			chunk := batch[micro*mbs*dp : (micro+1)*mbs*dp]
			mine := chunk[m.Coord().DP*mbs : (m.Coord().DP+1)*mbs]
			got := m.SampleOffset(mbs, micro)
			assert.Equal(t, mine[0], got, "rank %d microbatch %d", r, micro)
			if m.Coord().TP == 0 && m.Coord().PP == 0 {
				for i := range mbs {
					covered[got+i]++
				}
			}
		}
	}
	for i, n := range covered {
		assert.Equal(t, 1, n, "sample %d is read by %d DP ranks", i, n)
	}
	assert.PanicsWithValue(t, "parallel: SampleOffset: micro-batch size 0 and microbatch 1: need size ≥ 1 and index ≥ 0",
		func() { meshes[0].SampleOffset(0, 1) })
}

func TestNewMeshErrors(t *testing.T) {
	ctx := context.Background()
	err := parallel.RunLocal(12, func(world parallel.Comm) error {
		_, err := parallel.NewMesh(ctx, world, parallel.Sizes{TP: 8})
		if err == nil || err.Error() != "parallel: world size 12 is not divisible by TP×CP×PP = 8" {
			t.Errorf("rank %d: NewMesh error %v", world.Rank(), err)
		}
		return nil
	})
	require.NoError(t, err)
	_, err = parallel.NewMesh(ctx, nil, parallel.Sizes{})
	assert.EqualError(t, err, "parallel: NewMesh: nil world Comm")
}
