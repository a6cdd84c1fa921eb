package parallel_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/parallel"
)

var expertAllAxes = []parallel.ExpertAxis{parallel.ExpertAxisTP, parallel.ExpertAxisEP, parallel.ExpertAxisDP, parallel.ExpertAxisPP}

// expertMeshAxes are the axes of the Mesh's expert groups: ep, etp, etp-ep, edp, emp.
var expertMeshAxes = [][]parallel.ExpertAxis{
	{parallel.ExpertAxisEP}, {parallel.ExpertAxisTP}, {parallel.ExpertAxisTP, parallel.ExpertAxisEP},
	{parallel.ExpertAxisDP}, {parallel.ExpertAxisTP, parallel.ExpertAxisEP, parallel.ExpertAxisPP},
}

// expertTable is an expert layout with its groups written out by hand from Megatron's
// RankGenerator(tp=ETP, ep=EP, dp=EDP, pp=PP, cp=1, order='tp-cp-ep-dp-pp'): rank =
// etp + ETP·(ep + EP·(edp + EDP·pp)), each group the ranks differing only on its axes
// (get_ranks('ep'), ('tp'), ('tp-ep'), ('dp'), ('tp-ep-pp'), ('pp')).
type expertTable struct {
	name                      string
	world                     int
	in                        parallel.Sizes // as a user writes them
	want                      parallel.Sizes // resolved
	edp                       int
	ep, etp, etpep, edpg, emp [][]int
	pp                        [][]int // the same as the dense PP groups
	coords                    map[int]parallel.ExpertCoord
}

var expertTables = []expertTable{{
	// ETP defaults to TP = 2; EDP = 8/(2·2·2) = 1: every stage holds the experts once.
	name: "world 8 TP=2 PP=2 EP=2", world: 8, in: parallel.Sizes{TP: 2, PP: 2, EP: 2},
	want: parallel.Sizes{TP: 2, CP: 1, PP: 2, DP: 2, EP: 2, ETP: 2}, edp: 1,
	ep:    [][]int{{0, 2}, {1, 3}, {4, 6}, {5, 7}},
	etp:   [][]int{{0, 1}, {2, 3}, {4, 5}, {6, 7}},
	etpep: [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}},
	edpg:  [][]int{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}},
	emp:   [][]int{{0, 1, 2, 3, 4, 5, 6, 7}},
	pp:    [][]int{{0, 4}, {1, 5}, {2, 6}, {3, 7}},
	coords: map[int]parallel.ExpertCoord{
		3: {ETP: 1, EP: 1, EDP: 0, PP: 0},
		6: {ETP: 0, EP: 1, EDP: 0, PP: 1},
	},
}, {
	// The world 8: PP=2, DP=4, EP=2, hence EDP = 2.
	name: "world 8 PP=2 DP=4 EP=2", world: 8, in: parallel.Sizes{PP: 2, DP: 4, EP: 2},
	want: parallel.Sizes{TP: 1, CP: 1, PP: 2, DP: 4, EP: 2, ETP: 1}, edp: 2,
	ep:    [][]int{{0, 1}, {2, 3}, {4, 5}, {6, 7}},
	etp:   [][]int{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}},
	etpep: [][]int{{0, 1}, {2, 3}, {4, 5}, {6, 7}},
	edpg:  [][]int{{0, 2}, {1, 3}, {4, 6}, {5, 7}},
	emp:   [][]int{{0, 1, 4, 5}, {2, 3, 6, 7}},
	pp:    [][]int{{0, 4}, {1, 5}, {2, 6}, {3, 7}},
	coords: map[int]parallel.ExpertCoord{
		2: {ETP: 0, EP: 0, EDP: 1, PP: 0},
		7: {ETP: 0, EP: 1, EDP: 1, PP: 1},
	},
}, {
	// Dense TP=2 but experts unsplit (ETP=1) over EP=4: EDP = 16/(1·4·2) = 2.
	name: "world 16 TP=2 ETP=1 EP=4 PP=2", world: 16, in: parallel.Sizes{TP: 2, ETP: 1, EP: 4, PP: 2},
	want: parallel.Sizes{TP: 2, CP: 1, PP: 2, DP: 4, EP: 4, ETP: 1}, edp: 2,
	ep:    [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}},
	etp:   [][]int{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}},
	etpep: [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}},
	edpg:  [][]int{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}},
	emp:   [][]int{{0, 1, 2, 3, 8, 9, 10, 11}, {4, 5, 6, 7, 12, 13, 14, 15}},
	pp:    [][]int{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}},
	coords: map[int]parallel.ExpertCoord{
		5:  {ETP: 0, EP: 1, EDP: 1, PP: 0},
		14: {ETP: 0, EP: 2, EDP: 1, PP: 1},
	},
}, {
	// Context parallelism: the expert layout has no CP axis, EDP = 16/(2·2) = 4 spans
	// the dense DP and CP.
	name: "world 16 TP=2 CP=2 EP=2", world: 16, in: parallel.Sizes{TP: 2, CP: 2, EP: 2},
	want: parallel.Sizes{TP: 2, CP: 2, PP: 1, DP: 4, EP: 2, ETP: 2}, edp: 4,
	ep:    [][]int{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}},
	etp:   [][]int{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}},
	etpep: [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}},
	edpg:  [][]int{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}},
	emp:   [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}},
	pp:    [][]int{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}},
	coords: map[int]parallel.ExpertCoord{
		9:  {ETP: 1, EP: 0, EDP: 2, PP: 0},
		15: {ETP: 1, EP: 1, EDP: 3, PP: 0},
	},
}, {
	// Expert-TP wider than the dense TP: experts split over ranks that are dense DP
	// replicas.
	name: "world 8 TP=1 ETP=2 EP=2", world: 8, in: parallel.Sizes{ETP: 2, EP: 2},
	want: parallel.Sizes{TP: 1, CP: 1, PP: 1, DP: 8, EP: 2, ETP: 2}, edp: 2,
	ep:    [][]int{{0, 2}, {1, 3}, {4, 6}, {5, 7}},
	etp:   [][]int{{0, 1}, {2, 3}, {4, 5}, {6, 7}},
	etpep: [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}},
	edpg:  [][]int{{0, 4}, {1, 5}, {2, 6}, {3, 7}},
	emp:   [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}},
	pp:    [][]int{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}},
	coords: map[int]parallel.ExpertCoord{
		5: {ETP: 1, EP: 0, EDP: 1, PP: 0},
	},
}}

// expertTableGroups returns the table's groups by Mesh group name, with their expert
// axes.
func expertTableGroups(tc expertTable) []struct {
	name string
	axes []parallel.ExpertAxis
	want [][]int
} {
	return []struct {
		name string
		axes []parallel.ExpertAxis
		want [][]int
	}{
		{"ep", []parallel.ExpertAxis{parallel.ExpertAxisEP}, tc.ep},
		{"etp", []parallel.ExpertAxis{parallel.ExpertAxisTP}, tc.etp},
		{"etp-ep", []parallel.ExpertAxis{parallel.ExpertAxisTP, parallel.ExpertAxisEP}, tc.etpep},
		{"edp", []parallel.ExpertAxis{parallel.ExpertAxisDP}, tc.edpg},
		{"emp", []parallel.ExpertAxis{parallel.ExpertAxisTP, parallel.ExpertAxisEP, parallel.ExpertAxisPP}, tc.emp},
		{"pp", []parallel.ExpertAxis{parallel.ExpertAxisPP}, tc.pp},
	}
}

func TestSizesExpertTables(t *testing.T) {
	for _, tc := range expertTables {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.in.Resolve(tc.world)
			require.NoError(t, err)
			require.Equal(t, tc.want, s)
			assert.Equal(t, tc.edp, s.EDP())
			for _, g := range expertTableGroups(tc) {
				assert.Equal(t, g.want, s.ExpertGroups(g.axes...), g.name)
			}
			assert.Equal(t, tc.pp, s.Groups(parallel.AxisPP), "dense PP groups")
			for r, c := range tc.coords {
				assert.Equal(t, c, s.ExpertCoord(r), "ExpertCoord(%d)", r)
				assert.Equal(t, r, s.ExpertRank(c), "ExpertRank(%v)", c)
			}
		})
	}
}

// TestSizesExpertDefault checks that the default expert layout (EP = 1, ETP = TP) has the
// dense groups' members, on Megatron's 16-rank example: experts are then split and
// reduced exactly as the MLP they replace.
func TestSizesExpertDefault(t *testing.T) {
	ex := megatron16
	s := ex.sizes
	assert.Equal(t, 2, s.EDP())
	assert.Equal(t, ex.tp, s.ExpertGroups(parallel.ExpertAxisTP))
	assert.Equal(t, ex.tp, s.ExpertGroups(parallel.ExpertAxisTP, parallel.ExpertAxisEP))
	assert.Equal(t, ex.cp, s.ExpertGroups(parallel.ExpertAxisEP), "EP = 1: every rank alone")
	assert.Equal(t, ex.dpcp, s.ExpertGroups(parallel.ExpertAxisDP))
	assert.Equal(t, ex.mp, s.ExpertGroups(parallel.ExpertAxisTP, parallel.ExpertAxisEP, parallel.ExpertAxisPP))
	assert.Equal(t, ex.pp, s.ExpertGroups(parallel.ExpertAxisPP))
	assert.Equal(t, parallel.ExpertCoord{ETP: 1, EP: 0, EDP: 1, PP: 3}, s.ExpertCoord(15))
}

// expertChoices returns the (ETP, EP) pairs tried on dense sizes s: the default (TP, 1),
// and a few others whose product divides the TP·CP·DP ranks of a stage, among them
// ETP = TP, ETP = 1 below a wider TP, and a prime EP.
func expertChoices(s parallel.Sizes) [][2]int {
	out := [][2]int{{s.TP, 1}}
	for _, e := range [][2]int{{1, 2}, {s.TP, 2}, {2, 4}, {1, 7}} {
		if (s.TP*s.CP*s.DP)%(e[0]*e[1]) == 0 && !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out
}

// TestSizesExpertProperties checks the expert decomposition on every dense layout of
// meshConfigs with several expert layouts: rank order ETP fastest, PP the dense stage
// (Megatron asserts that both decompositions have the same pipeline groups), and every
// kind of expert group.
func TestSizesExpertProperties(t *testing.T) {
	n := 0
	for _, dense := range meshConfigs() {
		for _, e := range expertChoices(dense) {
			want := dense
			want.ETP, want.EP = e[0], e[1]
			world := dense.World()
			t.Run(fmt.Sprintf("%v ETP=%d EP=%d", dense, e[0], e[1]), func(t *testing.T) {
				s, err := parallel.Sizes{TP: dense.TP, CP: dense.CP, PP: dense.PP, EP: e[1], ETP: e[0]}.Resolve(world)
				require.NoError(t, err)
				require.Equal(t, want, s)
				require.Equal(t, world/(e[0]*e[1]*s.PP), s.EDP())
				checkExpertRankOrder(t, s)
				require.Equal(t, s.Groups(parallel.AxisPP), s.ExpertGroups(parallel.ExpertAxisPP), "pipeline groups")
				// Every kind of group on small worlds, the Mesh's on large ones (time).
				kinds := axisSubsets(expertAllAxes)
				if world > 128 {
					kinds = expertMeshAxes
				}
				for _, axes := range kinds {
					checkGroupsOver(t, expertDecomposition(s), axes)
				}
			})
			n++
		}
	}
	require.GreaterOrEqual(t, n, 100)
}

// checkExpertRankOrder enumerates expert coordinates with ETP fastest and PP slowest
// (Megatron's tp-ep-dp-pp) and checks that the n-th is rank n both ways, on the dense
// rank's pipeline stage.
func checkExpertRankOrder(t *testing.T, s parallel.Sizes) {
	t.Helper()
	n := 0
	for pp := range s.PP {
		for edp := range s.EDP() {
			for ep := range s.EP {
				for etp := range s.ETP {
					c := parallel.ExpertCoord{ETP: etp, EP: ep, EDP: edp, PP: pp}
					if got := s.ExpertRank(c); got != n {
						t.Fatalf("ExpertRank(%v) = %d, want %d", c, got, n)
					}
					if got := s.ExpertCoord(n); got != c || s.Coord(n).PP != pp {
						t.Fatalf("ExpertCoord(%d) = %v (dense %v), want %v", n, got, s.Coord(n), c)
					}
					n++
				}
			}
		}
	}
}

// expertDecomposition is s's ETP × EP × EDP × PP decomposition.
func expertDecomposition(s parallel.Sizes) decomposition[parallel.ExpertAxis] {
	return decomposition[parallel.ExpertAxis]{
		world: s.World(), axes: expertAllAxes,
		size: func(a parallel.ExpertAxis) int { return [...]int{s.ETP, s.EP, s.EDP(), s.PP}[a] },
		coord: func(r int, a parallel.ExpertAxis) int {
			c := s.ExpertCoord(r)
			return [...]int{c.ETP, c.EP, c.EDP, c.PP}[a]
		},
		groups: s.ExpertGroups, groupRanks: s.ExpertGroupRanks,
	}
}

func TestSizesExpertStringsAndPanics(t *testing.T) {
	for _, tc := range []struct {
		in   parallel.Sizes
		want string
	}{
		{parallel.Sizes{TP: 2, CP: 1, PP: 4, DP: 2, EP: 1, ETP: 2}, "TP=2 CP=1 PP=4 DP=2"},
		{parallel.Sizes{TP: 2, CP: 1, PP: 4, DP: 2}, "TP=2 CP=1 PP=4 DP=2"},
		{parallel.Sizes{TP: 2, CP: 1, PP: 2, DP: 2, EP: 2, ETP: 2}, "TP=2 CP=1 PP=2 DP=2 EP=2"},
		{parallel.Sizes{TP: 2, CP: 1, PP: 2, DP: 4, EP: 4, ETP: 1}, "TP=2 CP=1 PP=2 DP=4 EP=4 ETP=1"},
		{parallel.Sizes{ETP: 2}, "TP=0 CP=0 PP=0 DP=0 ETP=2"},
	} {
		assert.Equal(t, tc.want, tc.in.String())
	}
	assert.Equal(t, "etp=1 ep=0 edp=2 pp=0", parallel.ExpertCoord{ETP: 1, EDP: 2}.String())
	assert.Equal(t, "etp ep edp pp", fmt.Sprint(parallel.ExpertAxisTP, parallel.ExpertAxisEP, parallel.ExpertAxisDP, parallel.ExpertAxisPP))

	s := expertTables[2].want // world 16, ETP=1, EP=4, EDP=2, PP=2
	for _, tc := range []struct {
		name, want string
		f          func()
	}{
		{"unresolved EP", "parallel: Sizes.EDP: expert sizes EP=0 ETP=0 not resolved (call Resolve)",
			func() { parallel.Sizes{TP: 1, CP: 1, PP: 1, DP: 1}.EDP() }},
		{"not dividing", "parallel: Sizes.ExpertGroups: ETP×EP = 1×3 does not divide TP×CP×DP = 8 (Resolve reports it)",
			func() { parallel.Sizes{TP: 2, CP: 1, PP: 2, DP: 4, EP: 3, ETP: 1}.ExpertGroups() }},
		{"rank", "parallel: Sizes.ExpertCoord: rank 16 out of range [0, 16)", func() { s.ExpertCoord(16) }},
		{"coordinate", "parallel: Sizes.ExpertRank: coordinates etp=0 ep=4 edp=0 pp=0 out of range for ETP=1 EP=4 EDP=2 PP=2",
			func() { s.ExpertRank(parallel.ExpertCoord{EP: 4}) }},
		{"axis", "parallel: Sizes.ExpertGroupRanks: invalid expert axis(4)",
			func() { s.ExpertGroupRanks(0, parallel.ExpertAxis(4)) }},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.PanicsWithValue(t, tc.want, tc.f) })
	}
}

// TestMeshLocalExpertTables builds each hand-written expert layout on goroutine ranks and
// checks every expert group Comm against the table, and the ranks' places in them.
func TestMeshLocalExpertTables(t *testing.T) {
	for _, tc := range expertTables {
		t.Run(tc.name, func(t *testing.T) {
			meshes, reports := buildMeshes(t, tc.world, tc.in)
			tables := map[string][][]int{}
			for _, g := range expertTableGroups(tc) {
				tables[g.name] = g.want
			}
			for r, m := range meshes {
				assert.Equal(t, tc.want, m.Sizes())
				for i, g := range meshExpertAccessors {
					checkMeshReport(t, r, g.name, reports[r][len(meshAccessors)+i], meshGroupOf(tables[g.name], r))
				}
				c := m.ExpertCoord()
				assert.Equal(t, m.Coord().PP, c.PP, "rank %d: stage", r)
				assert.Equal(t, [4]int{c.EP, c.ETP, c.EDP, c.ETP + tc.want.ETP*(c.EP+tc.want.EP*c.PP)},
					[4]int{m.EP().Rank(), m.ExpertTP().Rank(), m.ExpertDP().Rank(), m.ExpertMP().Rank()}, "rank %d", r)
				assert.Equal(t, c.ETP+tc.want.ETP*c.EP, m.ExpertTPEP().Rank(), "rank %d", r)
				if want, ok := tc.coords[r]; ok {
					assert.Equal(t, want, c, "rank %d", r)
				}
			}
		})
	}
}

func TestMeshLocalExpertString(t *testing.T) {
	meshes, _ := buildMeshes(t, 8, parallel.Sizes{TP: 2, PP: 2, EP: 2})
	assert.Equal(t, "rank 5 of 8 (TP=2 CP=1 PP=2 DP=2 EP=2) at tp=1 cp=0 dp=0 pp=1, etp=1 ep=0 edp=0 pp=1", meshes[5].String())
	meshes, _ = buildMeshes(t, 4, parallel.Sizes{TP: 2, EP: 1})
	assert.Equal(t, "rank 3 of 4 (TP=2 CP=1 PP=1 DP=2) at tp=1 cp=0 dp=1 pp=0", meshes[3].String(), "dense: as before")
}
