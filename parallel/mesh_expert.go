package parallel

import "fmt"

// ExpertAxis is an axis of the expert decomposition ETP × EP × EDP × PP (see Sizes). A
// group over a set of expert axes holds the ranks whose expert coordinates differ only on
// those axes: the expert-parallel group over ExpertAxisEP, the expert-data-parallel group
// over ExpertAxisDP, the expert-model-parallel group over ExpertAxisTP, ExpertAxisEP and
// ExpertAxisPP.
type ExpertAxis uint8

// Expert axes, in Megatron's order for the expert decomposition, tp-ep-dp-pp (fastest
// first).
const (
	ExpertAxisTP ExpertAxis = iota // expert-tensor parallelism: splits each expert's hidden size
	ExpertAxisEP                   // expert parallelism: each rank holds E/EP experts
	ExpertAxisDP                   // expert-data parallelism: replicas of the same experts
	ExpertAxisPP                   // the pipeline, the same axis as AxisPP
)

func (a ExpertAxis) String() string {
	switch a {
	case ExpertAxisTP:
		return "etp"
	case ExpertAxisEP:
		return "ep"
	case ExpertAxisDP:
		return "edp"
	case ExpertAxisPP:
		return "pp"
	}
	return fmt.Sprintf("expert axis(%d)", uint8(a))
}

// ExpertCoord is a rank's position in the expert decomposition; each field is in
// [0, size of that axis), and PP equals the dense Coord's PP.
type ExpertCoord struct {
	ETP, EP, EDP, PP int
}

// String returns the coordinates as "etp=0 ep=3 edp=1 pp=0".
func (c ExpertCoord) String() string {
	return fmt.Sprintf("etp=%d ep=%d edp=%d pp=%d", c.ETP, c.EP, c.EDP, c.PP)
}

// vec returns c as a grid coordinate indexed by ExpertAxis.
func (c ExpertCoord) vec() [4]int { return [4]int{c.ETP, c.EP, c.EDP, c.PP} }

// EDP returns the expert-data-parallel size, World / (ETP·EP·PP) = TP·CP·DP / (ETP·EP):
// how many ranks hold a copy of the same expert shard, over which expert gradients are
// reduced. With EP = 1 and ETP = TP it is CP·DP, the dense gradient group's size. It
// panics if s is not resolved (EP or ETP below 1 included) or ETP·EP does not divide
// TP·CP·DP.
func (s Sizes) EDP() int {
	s.mustExpert("EDP")
	return s.TP * s.CP * s.DP / (s.ETP * s.EP)
}

// expertGrid returns the expert decomposition as a grid indexed by ExpertAxis.
func (s Sizes) expertGrid() grid {
	return grid{s.ETP, s.EP, s.TP * s.CP * s.DP / (s.ETP * s.EP), s.PP}
}

// mustExpert panics unless s is resolved, expert sizes included, and the expert layout
// divides a pipeline stage.
func (s Sizes) mustExpert(op string) {
	s.mustResolved(op)
	if s.EP < 1 || s.ETP < 1 {
		panic(fmt.Sprintf("parallel: Sizes.%s: expert sizes EP=%d ETP=%d not resolved (call Resolve)", op, s.EP, s.ETP))
	}
	if stage := s.TP * s.CP * s.DP; stage%(s.ETP*s.EP) != 0 {
		panic(fmt.Sprintf("parallel: Sizes.%s: ETP×EP = %d×%d does not divide TP×CP×DP = %d (Resolve reports it)",
			op, s.ETP, s.EP, stage))
	}
}

// ExpertCoord returns rank's coordinates in the expert decomposition. It panics if rank
// is outside [0, World()) or s is not resolved.
func (s Sizes) ExpertCoord(rank int) ExpertCoord {
	s.mustExpert("ExpertCoord")
	s.mustRank("ExpertCoord", rank)
	c := s.expertGrid().coord(rank)
	return ExpertCoord{ETP: c[0], EP: c[1], EDP: c[2], PP: c[3]}
}

// ExpertRank returns the rank at expert coordinates c, etp + ETP·(ep + EP·(edp +
// EDP·pp)). It panics if a coordinate is out of range or s is not resolved.
func (s Sizes) ExpertRank(c ExpertCoord) int {
	s.mustExpert("ExpertRank")
	g := s.expertGrid()
	if !g.inRange(c.vec()) {
		panic(fmt.Sprintf("parallel: Sizes.ExpertRank: coordinates %v out of range for ETP=%d EP=%d EDP=%d PP=%d",
			c, g[0], g[1], g[2], g[3]))
	}
	return g.rank(c.vec())
}

// ExpertGroupRanks returns the world ranks of rank's group over expert axes, in
// increasing order, as GroupRanks does for the dense axes: a rank's index in the result
// is its rank in the group, for a single axis its coordinate on it. It panics if rank is
// out of range, an axis is invalid or s is not resolved.
func (s Sizes) ExpertGroupRanks(rank int, axes ...ExpertAxis) []int {
	s.mustExpert("ExpertGroupRanks")
	s.mustRank("ExpertGroupRanks", rank)
	g := s.expertGrid()
	return g.group(g.coord(rank), axisMask("ExpertGroupRanks", axes))
}

// ExpertGroups returns every group over expert axes, ordered by smallest member;
// together they partition the world. It panics if an axis is invalid or s is not
// resolved.
func (s Sizes) ExpertGroups(axes ...ExpertAxis) [][]int {
	s.mustExpert("ExpertGroups")
	return s.expertGrid().groups(axisMask("ExpertGroups", axes))
}
