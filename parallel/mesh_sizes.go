package parallel

import "fmt"

// Sizes are the sizes of the mesh axes: tensor (TP), context (CP), pipeline (PP) and data
// (DP) parallelism, and for mixture-of-experts layers expert (EP) and expert-tensor (ETP)
// parallelism. The world is decomposed twice over the same ranks, as in Megatron-core:
//
//	dense layers:   World = TP × CP × DP × PP
//	expert layers:  World = ETP × EP × EDP × PP    (EDP = World / (ETP·EP·PP), see EDP)
//
// Zero TP, CP or PP mean 1; zero EP means 1 and zero ETP means TP (Megatron's defaults);
// zero DP means "whatever the world size leaves". Resolve fills them in. The rank
// arithmetic (Coord, Rank, GroupRanks, Groups, EmbeddingRanks, EmbeddingGroups, World,
// and for experts EDP, ExpertCoord, ExpertRank, ExpertGroupRanks, ExpertGroups) is a pure
// function of resolved Sizes, with no communicator involved, so it can be tested, printed
// and used to plan a layout before any process starts. Those methods panic if a size they
// use is below 1 (call Resolve first) or a rank or coordinate is out of range.
//
// Ranks follow Megatron's default order tp-cp-ep-dp-pp, leftmost fastest: the dense
// decomposition (EP = 1) is
//
//	rank = tp + TP·(cp + CP·(dp + DP·pp))
//
// so TP groups are blocks of TP consecutive ranks (they stay within a node when TP divides
// the GPUs per node) and the stages of a pipeline are TP·CP·DP ranks apart. The expert
// decomposition (CP = 1, TP read as ETP, DP as EDP) is
//
//	rank = etp + ETP·(ep + EP·(edp + EDP·pp))
//
// Both put PP slowest, so a rank's pipeline stage, and its pipeline group, are the same
// in both (Megatron asserts it): the ETP·EP·EDP = TP·CP·DP ranks of a stage are laid out
// once per decomposition.
type Sizes struct {
	TP, CP, PP, DP int
	EP, ETP        int
}

// Resolve returns s with zero TP, CP, PP and EP set to 1, a zero ETP set to TP and a zero
// DP set to world / (TP·CP·PP). It returns an error if a size is negative, world is not
// positive, world is not divisible by TP·CP·PP, a given DP does not make TP·CP·PP·DP =
// world, or world is not divisible by ETP·EP·PP (Megatron's check: the expert layout
// ETP × EP must divide the TP·CP·DP ranks of a pipeline stage).
func (s Sizes) Resolve(world int) (Sizes, error) {
	if world < 1 {
		return s, fmt.Errorf("parallel: world size %d must be positive", world)
	}
	for _, v := range []struct {
		name string
		n    *int
	}{{"TP", &s.TP}, {"CP", &s.CP}, {"PP", &s.PP}, {"DP", &s.DP}, {"EP", &s.EP}, {"ETP", &s.ETP}} {
		if *v.n < 0 {
			return s, fmt.Errorf("parallel: %s size %d is negative", v.name, *v.n)
		}
		if *v.n == 0 && v.name != "DP" && v.name != "ETP" {
			*v.n = 1
		}
	}
	if s.ETP == 0 {
		s.ETP = s.TP
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
	if expert := s.ETP * s.EP * s.PP; world%expert != 0 {
		return s, fmt.Errorf("parallel: world size %d is not divisible by ETP×EP×PP = %d×%d×%d = %d "+
			"(expert-TP × EP must divide TP×CP×DP = %d, the ranks of a pipeline stage)",
			world, s.ETP, s.EP, s.PP, expert, world/s.PP)
	}
	return s, nil
}

// World returns TP·CP·DP·PP, the number of ranks.
func (s Sizes) World() int {
	s.mustResolved("World")
	return s.TP * s.CP * s.DP * s.PP
}

// String returns the sizes as "TP=2 CP=1 PP=4 DP=2", followed by " EP=4" when EP is not
// 1 (or 0) and " ETP=1" when ETP is not its default, TP: a dense layout prints as it did
// before expert parallelism existed.
func (s Sizes) String() string {
	str := fmt.Sprintf("TP=%d CP=%d PP=%d DP=%d", s.TP, s.CP, s.PP, s.DP)
	if s.EP != 0 && s.EP != 1 {
		str += fmt.Sprintf(" EP=%d", s.EP)
	}
	if s.ETP != 0 && s.ETP != max(s.TP, 1) {
		str += fmt.Sprintf(" ETP=%d", s.ETP)
	}
	return str
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

// Coord returns rank's coordinates. It panics if rank is outside [0, World()).
func (s Sizes) Coord(rank int) Coord {
	s.mustRank("Coord", rank)
	c := s.grid().coord(rank)
	return Coord{TP: c[0], CP: c[1], DP: c[2], PP: c[3]}
}

// Rank returns the rank at coordinates c, tp + TP·(cp + CP·(dp + DP·pp)). It panics if a
// coordinate is out of range.
func (s Sizes) Rank(c Coord) int {
	s.mustResolved("Rank")
	if !s.grid().inRange(c.vec()) {
		panic(fmt.Sprintf("parallel: Sizes.Rank: coordinates %v out of range for %v", c, s))
	}
	return s.grid().rank(c.vec())
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

// grid returns the dense decomposition as a grid indexed by Axis.
func (s Sizes) grid() grid { return grid{s.TP, s.CP, s.DP, s.PP} }

// vec returns c as a grid coordinate indexed by Axis.
func (c Coord) vec() [4]int { return [4]int{c.TP, c.CP, c.DP, c.PP} }

// axisMask returns the set of axes as a bit mask; it panics on an invalid axis.
func axisMask[A interface {
	~uint8
	fmt.Stringer
}](op string, axes []A) (mask uint8) {
	for _, a := range axes {
		if a >= A(len(grid{})) {
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
	return s.grid().group(s.Coord(rank).vec(), axisMask("GroupRanks", axes))
}

// Groups returns every group over axes, ordered by smallest member; together they
// partition the world. It panics if an axis is invalid.
func (s Sizes) Groups(axes ...Axis) [][]int {
	s.mustResolved("Groups")
	return s.grid().groups(axisMask("Groups", axes))
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
