package commtest

import (
	"context"
	"fmt"
	"slices"

	"megago/parallel"
	"megago/tensor"
)

// MeshWorld is the world size of MeshLayouts.
const MeshWorld = 8

// MeshLayouts are the layouts of MeshWorld ranks that every transport builds a Mesh of
// with Mesh: a dense one, and expert layouts with EP over DP, expert-TP equal to,
// narrower and wider than TP, and context parallelism.
var MeshLayouts = []parallel.Sizes{
	{TP: 2, PP: 2},
	{PP: 2, DP: 4, EP: 2},
	{TP: 2, PP: 2, EP: 2},
	{TP: 2, ETP: 1, EP: 4},
	{ETP: 2, EP: 2, PP: 2},
	{TP: 2, CP: 2, EP: 2},
}

// meshGroup is one group a Mesh hands out: its accessor and the members the rank
// arithmetic of Sizes gives it (nil: the rank is in no such group).
type meshGroup struct {
	name    string
	comm    func(m *parallel.Mesh) parallel.Comm
	members func(s parallel.Sizes, rank int) []int
}

// over returns the members of rank's dense group over axes.
func over(axes ...parallel.Axis) func(parallel.Sizes, int) []int {
	return func(s parallel.Sizes, r int) []int { return s.GroupRanks(r, axes...) }
}

// overExpert returns the members of rank's expert group over axes.
func overExpert(axes ...parallel.ExpertAxis) func(parallel.Sizes, int) []int {
	return func(s parallel.Sizes, r int) []int { return s.ExpertGroupRanks(r, axes...) }
}

// meshGroups are every group of a Mesh, dense and expert.
var meshGroups = []meshGroup{
	{"tp", (*parallel.Mesh).TP, over(parallel.AxisTP)},
	{"cp", (*parallel.Mesh).CP, over(parallel.AxisCP)},
	{"dp", (*parallel.Mesh).DP, over(parallel.AxisDP)},
	{"dp-cp", (*parallel.Mesh).DPCP, over(parallel.AxisDP, parallel.AxisCP)},
	{"pp", (*parallel.Mesh).PP, over(parallel.AxisPP)},
	{"mp", (*parallel.Mesh).MP, over(parallel.AxisTP, parallel.AxisPP)},
	{"embedding", (*parallel.Mesh).Embedding, func(s parallel.Sizes, r int) []int {
		if emb := s.EmbeddingRanks(r); slices.Contains(emb, r) {
			return emb
		}
		return nil
	}},
	{"ep", (*parallel.Mesh).EP, overExpert(parallel.ExpertAxisEP)},
	{"etp", (*parallel.Mesh).ExpertTP, overExpert(parallel.ExpertAxisTP)},
	{"etp-ep", (*parallel.Mesh).ExpertTPEP, overExpert(parallel.ExpertAxisTP, parallel.ExpertAxisEP)},
	{"edp", (*parallel.Mesh).ExpertDP, overExpert(parallel.ExpertAxisDP)},
	{"emp", (*parallel.Mesh).ExpertMP, overExpert(parallel.ExpertAxisTP, parallel.ExpertAxisEP, parallel.ExpertAxisPP)},
	{"tp-dp-cp", (*parallel.Mesh).TPDPCP, over(parallel.AxisTP, parallel.AxisDP, parallel.AxisCP)},
}

// Mesh builds the Mesh of sizes s on world (every rank of world calls it) and checks
// each group it hands out, dense and expert: its name, its members (world ranks, in
// group-rank order) and this rank's place among them as the rank arithmetic of Sizes
// lists them, and an all-reduce over it of [1, world rank] on dev, which must give
// [group size, sum of the members]. The groups are probed in an order that differs from
// the one NewMesh creates them in, so a transport that mixed up groups would fail.
func Mesh(ctx context.Context, world parallel.Comm, s parallel.Sizes, dev *tensor.Device) error {
	m, err := parallel.NewMesh(ctx, world, s)
	if err != nil {
		return err
	}
	s, r := m.Sizes(), world.Rank()
	if m.Coord() != s.Coord(r) || m.ExpertCoord() != s.ExpertCoord(r) {
		return fmt.Errorf("mesh at %v, %v; want %v, %v", m.Coord(), m.ExpertCoord(), s.Coord(r), s.ExpertCoord(r))
	}
	for _, g := range slices.Backward(meshGroups) {
		if err := checkMeshGroup(ctx, world, g.comm(m), g.name, g.members(s, r), dev); err != nil {
			return fmt.Errorf("group %s: %w", g.name, err)
		}
	}
	return nil
}

// checkMeshGroup checks one group c of world against its expected members (nil: c
// should be nil).
func checkMeshGroup(ctx context.Context, world, c parallel.Comm, name string, members []int, dev *tensor.Device) error {
	if members == nil || c == nil {
		if members != nil || c != nil {
			return fmt.Errorf("got a group: %v; want members %v", c != nil, members)
		}
		return nil
	}
	got := make([]int, c.Size())
	for i := range got {
		got[i] = c.WorldRank(i)
	}
	want := make([]int, len(members))
	sum := 0
	for i, r := range members {
		want[i] = world.WorldRank(r)
		sum += want[i]
	}
	me := world.WorldRank(world.Rank())
	if c.Name() != name || !slices.Equal(got, want) || got[c.Rank()] != me {
		return fmt.Errorf("named %q with world ranks %v, this rank at %d; want %q, %v, world rank %d",
			c.Name(), got, c.Rank(), name, want, me)
	}
	x := Tensor(dev, tensor.I64, []float64{1, float64(me)}, 2)
	if err := c.AllReduce(ctx, x, parallel.Sum); err != nil {
		return err
	}
	return Check("all-reduce of [1, world rank]", x, []float64{float64(len(want)), float64(sum)})
}
