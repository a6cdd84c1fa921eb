package parallel_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/parallel"
)

// megatron16 is the example of Megatron's parallel_state.py docstring (and
// MEGATRON-FACTS.md), 16 ranks with TP=2, PP=4, hence DP=2, written out by hand from
// rank = tp + 2·(dp + 2·pp). The model-parallel groups are Megatron's get_ranks('tp-pp').
var megatron16 = struct {
	sizes                         parallel.Sizes
	tp, cp, dp, dpcp, pp, mp, emb [][]int
	coords                        map[int]parallel.Coord
}{
	sizes: parallel.Sizes{TP: 2, CP: 1, PP: 4, DP: 2, EP: 1, ETP: 2},
	tp:    [][]int{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}},
	cp:    [][]int{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}},
	dp:    [][]int{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}},
	dpcp:  [][]int{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}},
	pp:    [][]int{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}},
	mp:    [][]int{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}},
	emb:   [][]int{{0, 12}, {1, 13}, {2, 14}, {3, 15}},
	coords: map[int]parallel.Coord{
		0:  {TP: 0, CP: 0, DP: 0, PP: 0},
		1:  {TP: 1, CP: 0, DP: 0, PP: 0},
		2:  {TP: 0, CP: 0, DP: 1, PP: 0},
		5:  {TP: 1, CP: 0, DP: 0, PP: 1},
		10: {TP: 0, CP: 0, DP: 1, PP: 2},
		13: {TP: 1, CP: 0, DP: 0, PP: 3},
		15: {TP: 1, CP: 0, DP: 1, PP: 3},
	},
}

func TestMeshMegatronExampleTable(t *testing.T) {
	ex := megatron16
	s, err := parallel.Sizes{TP: 2, PP: 4}.Resolve(16)
	require.NoError(t, err)
	require.Equal(t, ex.sizes, s)
	for _, tc := range []struct {
		name string
		axes []parallel.Axis
		want [][]int
	}{
		{"tp", []parallel.Axis{parallel.AxisTP}, ex.tp},
		{"cp", []parallel.Axis{parallel.AxisCP}, ex.cp},
		{"dp", []parallel.Axis{parallel.AxisDP}, ex.dp},
		{"dp-cp", []parallel.Axis{parallel.AxisDP, parallel.AxisCP}, ex.dpcp},
		{"pp", []parallel.Axis{parallel.AxisPP}, ex.pp},
		{"mp", []parallel.Axis{parallel.AxisTP, parallel.AxisPP}, ex.mp},
	} {
		assert.Equal(t, tc.want, s.Groups(tc.axes...), tc.name)
	}
	assert.Equal(t, ex.emb, s.EmbeddingGroups())
	assert.Equal(t, []int{1, 13}, s.EmbeddingRanks(9), "a middle stage's pipeline")
	for r, c := range ex.coords {
		assert.Equal(t, c, s.Coord(r), "Coord(%d)", r)
		assert.Equal(t, r, s.Rank(c), "Rank(%v)", c)
	}
}

// TestMeshCPTable is a hand-written table with context parallelism: 8 ranks, TP=2, CP=2,
// DP=2, rank = tp + 2·(cp + 2·dp).
func TestMeshCPTable(t *testing.T) {
	s, err := parallel.Sizes{TP: 2, CP: 2}.Resolve(8)
	require.NoError(t, err)
	assert.Equal(t, parallel.Sizes{TP: 2, CP: 2, PP: 1, DP: 2, EP: 1, ETP: 2}, s)
	assert.Equal(t, [][]int{{0, 1}, {2, 3}, {4, 5}, {6, 7}}, s.Groups(parallel.AxisTP))
	assert.Equal(t, [][]int{{0, 2}, {1, 3}, {4, 6}, {5, 7}}, s.Groups(parallel.AxisCP))
	assert.Equal(t, [][]int{{0, 4}, {1, 5}, {2, 6}, {3, 7}}, s.Groups(parallel.AxisDP))
	assert.Equal(t, [][]int{{0, 2, 4, 6}, {1, 3, 5, 7}}, s.Groups(parallel.AxisDP, parallel.AxisCP))
	assert.Equal(t, [][]int{{0, 1}, {2, 3}, {4, 5}, {6, 7}}, s.Groups(parallel.AxisTP, parallel.AxisPP))
	assert.Equal(t, []int{6}, s.EmbeddingRanks(6), "PP=1: the rank alone")
	assert.Equal(t, parallel.Coord{TP: 1, CP: 1, DP: 1, PP: 0}, s.Coord(7))
}

// meshConfigs returns a deterministic list of resolved sizes with worlds up to 1024 ranks:
// a grid over small and prime axis sizes (CP > 1 included) plus extremes.
func meshConfigs() []parallel.Sizes {
	const maxWorld = 1024
	var out []parallel.Sizes
	for _, tp := range []int{1, 2, 3, 8} {
		for _, cp := range []int{1, 2, 3} {
			for _, pp := range []int{1, 2, 4, 5} {
				for _, dp := range []int{1, 2, 7, 16} {
					if tp*cp*pp*dp <= maxWorld {
						out = append(out, parallel.Sizes{TP: tp, CP: cp, PP: pp, DP: dp})
					}
				}
			}
		}
	}
	out = append(out,
		parallel.Sizes{TP: 8, CP: 2, PP: 4, DP: 16}, // 1024
		parallel.Sizes{TP: 1024, CP: 1, PP: 1, DP: 1},
		parallel.Sizes{TP: 1, CP: 1, PP: 1024, DP: 1},
		parallel.Sizes{TP: 1, CP: 1, PP: 1, DP: 1021}, // prime world
		parallel.Sizes{TP: 1, CP: 1021, PP: 1, DP: 1},
		parallel.Sizes{TP: 3, CP: 5, PP: 13, DP: 5}, // 975
		parallel.Sizes{TP: 4, CP: 1, PP: 2, DP: 128},
	)
	for i := range out { // the default expert layout, as Resolve fills it in
		out[i].EP, out[i].ETP = 1, out[i].TP
	}
	return out
}

var meshAllAxes = []parallel.Axis{parallel.AxisTP, parallel.AxisCP, parallel.AxisDP, parallel.AxisPP}

// axisSubsets returns all 16 subsets of the four axes of a decomposition: every kind of
// group there can be.
func axisSubsets[A any](all []A) [][]A {
	var out [][]A
	for mask := range 1 << len(all) {
		var axes []A
		for i, a := range all {
			if mask&(1<<i) != 0 {
				axes = append(axes, a)
			}
		}
		out = append(out, axes)
	}
	return out
}

// meshAxisSubsets returns all 16 subsets of the dense axes.
func meshAxisSubsets() [][]parallel.Axis { return axisSubsets(meshAllAxes) }

func meshCoordOn(c parallel.Coord, a parallel.Axis) int {
	return [...]int{c.TP, c.CP, c.DP, c.PP}[a]
}

func meshAxisSize(s parallel.Sizes, a parallel.Axis) int {
	return [...]int{s.TP, s.CP, s.DP, s.PP}[a]
}

// decomposition is one of the two ways Sizes lays the world out (dense or expert), as
// the generic group checks see it.
type decomposition[A comparable] struct {
	world      int
	axes       []A                             // all four, fastest first
	size       func(a A) int                   // the size of axis a
	coord      func(rank int, a A) int         // rank's coordinate on axis a
	groups     func(axes ...A) [][]int         // Groups or ExpertGroups
	groupRanks func(rank int, axes ...A) []int // GroupRanks or ExpertGroupRanks
}

// denseDecomposition is s's TP × CP × DP × PP decomposition.
func denseDecomposition(s parallel.Sizes) decomposition[parallel.Axis] {
	return decomposition[parallel.Axis]{
		world: s.World(), axes: meshAllAxes,
		size:   func(a parallel.Axis) int { return meshAxisSize(s, a) },
		coord:  func(r int, a parallel.Axis) int { return meshCoordOn(s.Coord(r), a) },
		groups: s.Groups, groupRanks: s.GroupRanks,
	}
}

func TestMeshProperties(t *testing.T) {
	configs := meshConfigs()
	require.GreaterOrEqual(t, len(configs), 30)
	for _, want := range configs {
		t.Run(want.String(), func(t *testing.T) {
			world := want.TP * want.CP * want.PP * want.DP
			s, err := parallel.Sizes{TP: want.TP, CP: want.CP, PP: want.PP}.Resolve(world)
			require.NoError(t, err)
			require.Equal(t, want, s, "DP inferred")
			require.Equal(t, world, s.World())
			checkMeshRankOrder(t, s)
			for _, axes := range meshAxisSubsets() {
				checkMeshGroups(t, s, axes)
			}
			checkMeshTPAndPP(t, s)
			checkMeshEmbedding(t, s)
		})
	}
}

// checkMeshRankOrder enumerates coordinates with TP fastest and PP slowest (Megatron's
// tp-cp-ep-dp-pp) and checks that the n-th is rank n both ways.
func checkMeshRankOrder(t *testing.T, s parallel.Sizes) {
	t.Helper()
	n := 0
	for pp := range s.PP {
		for dp := range s.DP {
			for cp := range s.CP {
				for tp := range s.TP {
					c := parallel.Coord{TP: tp, CP: cp, DP: dp, PP: pp}
					if got := s.Rank(c); got != n {
						t.Fatalf("Rank(%v) = %d, want %d", c, got, n)
					}
					if got := s.Coord(n); got != c {
						t.Fatalf("Coord(%d) = %v, want %v", n, got, c)
					}
					n++
				}
			}
		}
	}
}

// checkMeshGroups checks the dense groups over axes (see checkGroupsOver).
func checkMeshGroups(t *testing.T, s parallel.Sizes, axes []parallel.Axis) {
	t.Helper()
	checkGroupsOver(t, denseDecomposition(s), axes)
}

// checkGroupsOver checks d's groups over axes: they partition the world, each has the
// product of the axes' sizes as its size, is sorted, its members agree on every other
// axis, and the group listing of its first and last member returns it.
func checkGroupsOver[A comparable](t *testing.T, d decomposition[A], axes []A) {
	t.Helper()
	size := 1
	for _, a := range axes {
		size *= d.size(a)
	}
	groups := d.groups(axes...)
	seen := make([]int, d.world)
	for _, g := range groups {
		if len(g) != size || !slices.IsSorted(g) {
			t.Fatalf("axes %v: group %v: want %d sorted ranks", axes, g, size)
		}
		for _, r := range g {
			seen[r]++
			for _, a := range d.axes {
				if !slices.Contains(axes, a) && d.coord(r, a) != d.coord(g[0], a) {
					t.Fatalf("axes %v: ranks %d and %d differ on %v", axes, g[0], r, a)
				}
			}
		}
		// The first and last member; the partition check covers the rest.
		for _, r := range []int{g[0], g[len(g)-1]} {
			if got := d.groupRanks(r, axes...); !slices.Equal(got, g) {
				t.Fatalf("axes %v: group ranks of %d = %v, want %v", axes, r, got, g)
			}
		}
	}
	for r, n := range seen {
		if n != 1 {
			t.Fatalf("axes %v: rank %d is in %d groups", axes, r, n)
		}
	}
}

// checkMeshTPAndPP checks that TP groups are TP consecutive ranks starting at a multiple of
// TP, and that a pipeline's stages are TP·CP·DP ranks apart, in stage order.
func checkMeshTPAndPP(t *testing.T, s parallel.Sizes) {
	t.Helper()
	for _, g := range s.Groups(parallel.AxisTP) {
		if g[0]%s.TP != 0 {
			t.Fatalf("TP group %v does not start at a multiple of %d", g, s.TP)
		}
		for i, r := range g {
			if r != g[0]+i {
				t.Fatalf("TP group %v is not consecutive", g)
			}
		}
	}
	stride := s.TP * s.CP * s.DP
	for _, g := range s.Groups(parallel.AxisPP) {
		for i, r := range g {
			if r != g[0]+i*stride || s.Coord(r).PP != i {
				t.Fatalf("PP group %v: member %d should be stage %d at %d", g, r, i, g[0]+i*stride)
			}
		}
	}
}

// checkMeshEmbedding checks that every rank's embedding group is {first, last} of its
// pipeline ({first} when PP = 1) and that the embedding groups partition the first and
// last stages.
func checkMeshEmbedding(t *testing.T, s parallel.Sizes) {
	t.Helper()
	for r := range s.World() {
		pp := s.GroupRanks(r, parallel.AxisPP)
		want := []int{pp[0], pp[len(pp)-1]}
		if s.PP == 1 {
			want = want[:1]
		}
		if got := s.EmbeddingRanks(r); !slices.Equal(got, want) {
			t.Fatalf("EmbeddingRanks(%d) = %v, want %v", r, got, want)
		}
	}
	var got, want []int
	for _, g := range s.EmbeddingGroups() {
		got = append(got, g...)
	}
	for r := range s.World() {
		if c := s.Coord(r); c.PP == 0 || c.PP == s.PP-1 {
			want = append(want, r)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("embedding groups cover %v, want the first and last stages %v", got, want)
	}
}

func TestSizesResolve(t *testing.T) {
	for _, tc := range []struct {
		name  string
		world int
		in    parallel.Sizes
		want  parallel.Sizes
		err   string
	}{
		{"all defaults", 16, parallel.Sizes{}, parallel.Sizes{TP: 1, CP: 1, PP: 1, DP: 16, EP: 1, ETP: 1}, ""},
		{"DP inferred", 16, parallel.Sizes{TP: 2, PP: 4}, parallel.Sizes{TP: 2, CP: 1, PP: 4, DP: 2, EP: 1, ETP: 2}, ""},
		{"DP given", 16, parallel.Sizes{TP: 2, PP: 4, DP: 2}, parallel.Sizes{TP: 2, CP: 1, PP: 4, DP: 2, EP: 1, ETP: 2}, ""},
		{"one rank", 1, parallel.Sizes{}, parallel.Sizes{TP: 1, CP: 1, PP: 1, DP: 1, EP: 1, ETP: 1}, ""},
		{"not divisible", 12, parallel.Sizes{TP: 8},
			parallel.Sizes{}, "parallel: world size 12 is not divisible by TP×CP×PP = 8"},
		{"CP not divisible", 12, parallel.Sizes{TP: 2, CP: 5},
			parallel.Sizes{}, "parallel: world size 12 is not divisible by TP×CP×PP = 10"},
		{"DP mismatch", 16, parallel.Sizes{TP: 2, DP: 3},
			parallel.Sizes{}, "parallel: TP×CP×PP×DP = 2×1×1×3 = 6, not the world size 16"},
		{"negative", 16, parallel.Sizes{PP: -2},
			parallel.Sizes{}, "parallel: PP size -2 is negative"},
		{"empty world", 0, parallel.Sizes{},
			parallel.Sizes{}, "parallel: world size 0 must be positive"},
		{"ETP defaults to TP", 8, parallel.Sizes{TP: 4, EP: 2}, parallel.Sizes{TP: 4, CP: 1, PP: 1, DP: 2, EP: 2, ETP: 4}, ""},
		{"EP and ETP given as 1", 8, parallel.Sizes{TP: 2, EP: 1, ETP: 1}, parallel.Sizes{TP: 2, CP: 1, PP: 1, DP: 4, EP: 1, ETP: 1}, ""},
		{"EP spans CP", 4, parallel.Sizes{CP: 2, EP: 4}, parallel.Sizes{TP: 1, CP: 2, PP: 1, DP: 2, EP: 4, ETP: 1}, ""},
		{"EP over a stage", 12, parallel.Sizes{PP: 2, EP: 3}, parallel.Sizes{TP: 1, CP: 1, PP: 2, DP: 6, EP: 3, ETP: 1}, ""},
		{"EP does not divide a stage", 12, parallel.Sizes{PP: 2, EP: 4}, parallel.Sizes{},
			"parallel: world size 12 is not divisible by ETP×EP×PP = 1×4×2 = 8 " +
				"(expert-TP × EP must divide TP×CP×DP = 6, the ranks of a pipeline stage)"},
		{"ETP too wide", 8, parallel.Sizes{TP: 2, PP: 2, ETP: 4, EP: 2}, parallel.Sizes{},
			"parallel: world size 8 is not divisible by ETP×EP×PP = 4×2×2 = 16 " +
				"(expert-TP × EP must divide TP×CP×DP = 4, the ranks of a pipeline stage)"},
		{"negative EP", 8, parallel.Sizes{EP: -1}, parallel.Sizes{}, "parallel: EP size -1 is negative"},
		{"negative ETP", 8, parallel.Sizes{ETP: -2}, parallel.Sizes{}, "parallel: ETP size -2 is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.in.Resolve(tc.world)
			if tc.err != "" {
				assert.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestSizesPanics(t *testing.T) {
	s := megatron16.sizes
	for _, tc := range []struct {
		name, want string
		f          func()
	}{
		{"unresolved", "parallel: Sizes.Coord: sizes TP=2 CP=0 PP=0 DP=0 not resolved (call Resolve)",
			func() { parallel.Sizes{TP: 2}.Coord(0) }},
		{"rank too big", "parallel: Sizes.Coord: rank 16 out of range [0, 16)", func() { s.Coord(16) }},
		{"negative rank", "parallel: Sizes.GroupRanks: rank -1 out of range [0, 16)",
			func() { s.GroupRanks(-1, parallel.AxisTP) }},
		{"coordinate", "parallel: Sizes.Rank: coordinates tp=2 cp=0 dp=0 pp=0 out of range for TP=2 CP=1 PP=4 DP=2",
			func() { s.Rank(parallel.Coord{TP: 2}) }},
		{"axis", "parallel: Sizes.Groups: invalid axis(7)", func() { s.Groups(parallel.Axis(7)) }},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.PanicsWithValue(t, tc.want, tc.f) })
	}
}

func TestSizesGroupRanksEdgeCases(t *testing.T) {
	s := megatron16.sizes
	assert.Equal(t, []int{9}, s.GroupRanks(9), "no axes: the rank alone")
	assert.Equal(t, s.GroupRanks(9, parallel.AxisPP), s.GroupRanks(9, parallel.AxisPP, parallel.AxisPP), "repeated axis")
	assert.Equal(t, s.GroupRanks(9, parallel.AxisTP, parallel.AxisPP), s.GroupRanks(9, parallel.AxisPP, parallel.AxisTP), "axis order")
	all := s.GroupRanks(9, meshAllAxes...)
	assert.Len(t, all, 16, "all axes: the world")
	assert.Equal(t, "TP=2 CP=1 PP=4 DP=2", s.String())
	assert.Equal(t, "tp=1 cp=0 dp=0 pp=3", s.Coord(13).String())
	assert.Equal(t, "tp cp dp pp", fmt.Sprint(parallel.AxisTP, parallel.AxisCP, parallel.AxisDP, parallel.AxisPP))
}
