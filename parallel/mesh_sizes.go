package parallel

import "fmt"

// Sizes are the sizes of the mesh axes: tensor (TP), context (CP), pipeline (PP) and data
// (DP) parallelism. World = TP × CP × DP × PP.
//
// Zero TP, CP or PP mean 1; zero DP means "whatever the world size leaves", filled in by
// Resolve. The rank arithmetic (Coord, Rank, GroupRanks, Groups, EmbeddingRanks, EmbeddingGroups,
// World) is
// a pure function of resolved Sizes, with no communicator involved, so it can be tested,
// printed and used to plan a layout before any process starts. Those methods panic if a
// size is below 1 (call Resolve first) or a rank or coordinate is out of range.
//
// Ranks follow Megatron's default order tp-cp-ep-dp-pp, leftmost fastest (expert
// parallelism aside):
//
//	rank = tp + TP·(cp + CP·(dp + DP·pp))
//
// so TP groups are blocks of TP consecutive ranks (they stay within a node when TP divides
// the GPUs per node) and the stages of a pipeline are TP·CP·DP ranks apart.
type Sizes struct {
	TP, CP, PP, DP int
}

// Resolve returns s with zero TP, CP and PP set to 1 and a zero DP set to
// world / (TP·CP·PP). It returns an error if a size is negative, world is not positive,
// world is not divisible by TP·CP·PP, or a given DP does not make TP·CP·PP·DP = world.
func (s Sizes) Resolve(world int) (Sizes, error) {
	if world < 1 {
		return s, fmt.Errorf("parallel: world size %d must be positive", world)
	}
	for _, v := range []struct {
		name string
		n    *int
	}{{"TP", &s.TP}, {"CP", &s.CP}, {"PP", &s.PP}, {"DP", &s.DP}} {
		if *v.n < 0 {
			return s, fmt.Errorf("parallel: %s size %d is negative", v.name, *v.n)
		}
		if *v.n == 0 && v.name != "DP" {
			*v.n = 1
		}
	}
	model := s.TP * s.CP * s.PP
	if world%model != 0 {
		return s, fmt.Errorf("parallel: world size %d is not divisible by TP×CP×PP = %d", world, model)
	}
	if s.DP == 0 {
		s.DP = world / model
	} else if model*s.DP != world {
		return s, fmt.Errorf("parallel: TP×CP×PP×DP = %d×%d×%d×%d = %d, not the world size %d",
			s.TP, s.CP, s.PP, s.DP, model*s.DP, world)
	}
	return s, nil
}

// World returns TP·CP·DP·PP, the number of ranks.
func (s Sizes) World() int {
	s.mustResolved("World")
	return s.TP * s.CP * s.DP * s.PP
}

// String returns the sizes as "TP=2 CP=1 PP=4 DP=2".
func (s Sizes) String() string {
	return fmt.Sprintf("TP=%d CP=%d PP=%d DP=%d", s.TP, s.CP, s.PP, s.DP)
}

func (s Sizes) mustResolved(op string) {
	if s.TP < 1 || s.CP < 1 || s.PP < 1 || s.DP < 1 {
		panic(fmt.Sprintf("parallel: Sizes.%s: sizes %v not resolved (call Resolve)", op, s))
	}
}

func (s Sizes) mustRank(op string, rank int) {
	s.mustResolved(op)
	if w := s.World(); rank < 0 || rank >= w {
		panic(fmt.Sprintf("parallel: Sizes.%s: rank %d out of range [0, %d)", op, rank, w))
	}
}

// Coord is a rank's position on each mesh axis; each field is in [0, size of that axis).
type Coord struct {
	TP, CP, DP, PP int
}

// String returns the coordinates as "tp=1 cp=0 dp=0 pp=3".
func (c Coord) String() string {
	return fmt.Sprintf("tp=%d cp=%d dp=%d pp=%d", c.TP, c.CP, c.DP, c.PP)
}

// at returns a pointer to c's coordinate on axis a.
func (c *Coord) at(a Axis) *int {
	switch a {
	case AxisTP:
		return &c.TP
	case AxisCP:
		return &c.CP
	case AxisDP:
		return &c.DP
	case AxisPP:
		return &c.PP
	}
	panic(fmt.Sprintf("parallel: invalid %v", a))
}

// Coord returns rank's coordinates. It panics if rank is outside [0, World()).
func (s Sizes) Coord(rank int) Coord {
	s.mustRank("Coord", rank)
	var c Coord
	c.TP, rank = rank%s.TP, rank/s.TP
	c.CP, rank = rank%s.CP, rank/s.CP
	c.DP, c.PP = rank%s.DP, rank/s.DP
	return c
}

// Rank returns the rank at coordinates c, tp + TP·(cp + CP·(dp + DP·pp)). It panics if a
// coordinate is out of range.
func (s Sizes) Rank(c Coord) int {
	s.mustResolved("Rank")
	if c.TP < 0 || c.TP >= s.TP || c.CP < 0 || c.CP >= s.CP || c.DP < 0 || c.DP >= s.DP || c.PP < 0 || c.PP >= s.PP {
		panic(fmt.Sprintf("parallel: Sizes.Rank: coordinates %v out of range for %v", c, s))
	}
	return c.TP + s.TP*(c.CP+s.CP*(c.DP+s.DP*c.PP))
}

// Axis is a mesh axis. A group "over" a set of axes holds the ranks whose coordinates
// differ only on those axes: the TP group over AxisTP, the DP×CP group over AxisDP and
// AxisCP, the model-parallel group over AxisTP and AxisPP.
type Axis uint8

// Mesh axes, in Megatron's order (fastest first).
const (
	AxisTP Axis = iota
	AxisCP
	AxisDP
	AxisPP
	numAxes
)

func (a Axis) String() string {
	switch a {
	case AxisTP:
		return "tp"
	case AxisCP:
		return "cp"
	case AxisDP:
		return "dp"
	case AxisPP:
		return "pp"
	}
	return fmt.Sprintf("axis(%d)", uint8(a))
}

// size returns the size of axis a.
func (s Sizes) size(a Axis) int {
	c := Coord{s.TP, s.CP, s.DP, s.PP}
	return *c.at(a)
}

// axisMask returns the set of axes as a bit mask; it panics on an invalid axis.
func axisMask(op string, axes []Axis) (mask uint8) {
	for _, a := range axes {
		if a >= numAxes {
			panic(fmt.Sprintf("parallel: Sizes.%s: invalid %v", op, a))
		}
		mask |= 1 << a
	}
	return mask
}

// GroupRanks returns the world ranks of rank's group over axes: every rank whose
// coordinates equal rank's on all other axes, in increasing order. A rank's index in the
// result is its rank in the group (groups order their members by world rank); for a
// single axis that is the rank's coordinate on it. With no axes the group is {rank}.
// Repeated axes count once. It panics if rank is out of range or an axis is invalid.
func (s Sizes) GroupRanks(rank int, axes ...Axis) []int {
	s.mustRank("GroupRanks", rank)
	return s.groupOf(s.Coord(rank), axisMask("GroupRanks", axes))
}

// groupOf lists the group over mask through c. Looping from the slowest axis (PP) to the
// fastest (TP) yields the ranks in increasing order.
func (s Sizes) groupOf(c Coord, mask uint8) []int {
	span := func(a Axis, at int) (lo, hi int) {
		if mask&(1<<a) != 0 {
			return 0, s.size(a)
		}
		return at, at + 1
	}
	n := 1
	for a := range numAxes {
		if mask&(1<<a) != 0 {
			n *= s.size(a)
		}
	}
	ranks := make([]int, 0, n)
	ppLo, ppHi := span(AxisPP, c.PP)
	dpLo, dpHi := span(AxisDP, c.DP)
	cpLo, cpHi := span(AxisCP, c.CP)
	tpLo, tpHi := span(AxisTP, c.TP)
	for pp := ppLo; pp < ppHi; pp++ {
		for dp := dpLo; dp < dpHi; dp++ {
			for cp := cpLo; cp < cpHi; cp++ {
				for tp := tpLo; tp < tpHi; tp++ {
					ranks = append(ranks, s.Rank(Coord{tp, cp, dp, pp}))
				}
			}
		}
	}
	return ranks
}

// leader returns the smallest rank of rank's group over mask: rank with its coordinates
// on those axes set to 0. It identifies the group (NewMesh uses it as the Split color).
func (s Sizes) leader(rank int, mask uint8) int {
	c := s.Coord(rank)
	for a := range numAxes {
		if mask&(1<<a) != 0 {
			*c.at(a) = 0
		}
	}
	return s.Rank(c)
}

// Groups returns every group over axes, ordered by smallest member; together they
// partition the world. It panics if an axis is invalid.
func (s Sizes) Groups(axes ...Axis) [][]int {
	s.mustResolved("Groups")
	mask := axisMask("Groups", axes)
	var groups [][]int
	for r := range s.World() {
		if s.leader(r, mask) == r {
			groups = append(groups, s.groupOf(s.Coord(r), mask))
		}
	}
	return groups
}

// EmbeddingRanks returns the embedding group of rank's pipeline: its first and last
// stage, {first, last}, or the one rank of a pipeline when PP = 1. That group
// all-reduces the gradient of word embeddings tied between the input embedding (first
// stage) and the output layer (last stage). The result does not contain rank when rank is
// a middle stage. It panics if rank is out of range.
func (s Sizes) EmbeddingRanks(rank int) []int {
	s.mustRank("EmbeddingRanks", rank)
	c := s.Coord(rank)
	c.PP = 0
	first := s.Rank(c)
	if s.PP == 1 {
		return []int{first}
	}
	c.PP = s.PP - 1
	return []int{first, s.Rank(c)}
}

// EmbeddingGroups returns the embedding group of every pipeline, ordered by first stage.
func (s Sizes) EmbeddingGroups() [][]int {
	s.mustResolved("EmbeddingGroups")
	var groups [][]int
	for r := range s.World() / s.PP {
		groups = append(groups, s.EmbeddingRanks(r))
	}
	return groups
}
