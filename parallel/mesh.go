package parallel

import (
	"context"
	"fmt"
)

// Mesh is one rank's view of the parallel layout: its coordinates and a Comm for each
// group it belongs to. Layers receive only the group they use (a TP layer gets m.TP()).
// A Mesh is an ordinary value: a process may hold several (tests build one per goroutine
// rank), and nothing is registered globally. Its methods only read it and are safe for
// concurrent use; the Comms it hands out follow their transport's rules.
//
// Groups, with the axes they span (see Sizes for the rank order), the Comm name used in
// errors, and what Megatron uses them for:
//
//	TP()        tp          "tp"         tensor-parallel collectives inside layers
//	CP()        cp          "cp"         context parallelism (sequence split in attention)
//	DP()        dp          "dp"         data-parallel replicas (without CP)
//	DPCP()      dp, cp      "dp-cp"      gradient all-reduce / distributed optimizer: CP
//	                                     ranks hold the same weights, so they join it
//	PP()        pp          "pp"         pipeline p2p; group rank = stage index
//	MP()        tp, pp      "mp"         model-parallel: one full model copy, as in
//	                                     Megatron's get_ranks('tp-pp') (CP excluded)
//	Embedding() first+last  "embedding"  tied word-embedding gradient; nil on middle stages
//
// and the groups of mixture-of-experts layers, over the expert axes (Megatron's
// get_ranks on its expert RankGenerator):
//
//	EP()          ep           "ep"      expert parallelism: the token dispatch among
//	                                     the ranks holding different experts
//	ExpertTP()    etp          "etp"     expert-tensor-parallel collectives inside experts
//	ExpertTPEP()  etp, ep      "etp-ep"  both: the allgather dispatcher's token gather
//	ExpertDP()    edp          "edp"     expert gradient all-reduce / distributed
//	                                     optimizer of expert parameters
//	ExpertMP()    etp, ep, pp  "emp"     gradient norm and inf check of expert
//	                                     parameters, as get_ranks('tp-ep-pp')
//	TPDPCP()      tp, dp, cp   "tp-dp-cp" the ranks that see different tokens of a
//	                                     step (dense axes): routers' token counts
//	                                     (Megatron's tp_dp_cp group)
//
// Every group orders its members by world rank, so a rank's rank in a single-axis group
// is its coordinate on that axis (PP().Rank() = Coord().PP, EP().Rank() =
// ExpertCoord().EP), in DPCP it is cp + CP·dp, in MP tp + TP·pp, in ExpertTPEP etp +
// ETP·ep and in ExpertMP etp + ETP·(ep + EP·pp). With the default expert sizes (EP = 1,
// ETP = TP) the expert groups have the members of TP, TP, DPCP and MP, and EP is this
// rank alone; they are separate Comms all the same.
type Mesh struct {
	sizes  Sizes
	coord  Coord
	ecoord ExpertCoord
	rank   int

	world, tp, cp, dp, dpcp, pp, mp, emb Comm
	ep, etp, etpep, edp, emp, tpdpcp     Comm
}

// meshGroup is a group NewMesh creates: its Comm name, its members given the sizes and a
// world rank, and where the Mesh keeps it.
type meshGroup struct {
	name    string
	members func(s Sizes, rank int) []int
	comm    func(m *Mesh) *Comm
}

// groupOver returns a meshGroup over dense axes.
func groupOver(name string, field func(m *Mesh) *Comm, axes ...Axis) meshGroup {
	return meshGroup{name, func(s Sizes, r int) []int { return s.GroupRanks(r, axes...) }, field}
}

// expertGroupOver returns a meshGroup over expert axes.
func expertGroupOver(name string, field func(m *Mesh) *Comm, axes ...ExpertAxis) meshGroup {
	return meshGroup{name, func(s Sizes, r int) []int { return s.ExpertGroupRanks(r, axes...) }, field}
}

// denseGroups and expertGroups list the groups NewMesh creates, in the order every rank
// splits them: the dense groups, then the embedding group, then the expert groups.
var (
	denseGroups = []meshGroup{
		groupOver("tp", func(m *Mesh) *Comm { return &m.tp }, AxisTP),
		groupOver("cp", func(m *Mesh) *Comm { return &m.cp }, AxisCP),
		groupOver("dp", func(m *Mesh) *Comm { return &m.dp }, AxisDP),
		groupOver("dp-cp", func(m *Mesh) *Comm { return &m.dpcp }, AxisDP, AxisCP),
		groupOver("pp", func(m *Mesh) *Comm { return &m.pp }, AxisPP),
		groupOver("mp", func(m *Mesh) *Comm { return &m.mp }, AxisTP, AxisPP),
	}
	expertGroups = []meshGroup{
		expertGroupOver("ep", func(m *Mesh) *Comm { return &m.ep }, ExpertAxisEP),
		expertGroupOver("etp", func(m *Mesh) *Comm { return &m.etp }, ExpertAxisTP),
		expertGroupOver("etp-ep", func(m *Mesh) *Comm { return &m.etpep }, ExpertAxisTP, ExpertAxisEP),
		expertGroupOver("edp", func(m *Mesh) *Comm { return &m.edp }, ExpertAxisDP),
		expertGroupOver("emp", func(m *Mesh) *Comm { return &m.emp }, ExpertAxisTP, ExpertAxisEP, ExpertAxisPP),
		groupOver("tp-dp-cp", func(m *Mesh) *Comm { return &m.tpdpcp }, AxisTP, AxisDP, AxisCP),
	}
)

// NewMesh builds the mesh of sizes s (resolved against world.Size(), so DP may be left 0)
// on the world Comm. Every rank of world must call it with the same sizes: it splits world
// once per group, in a fixed order, each rank passing its group's smallest member as the
// color and its world rank as the key. Groups of size 1 are created too, so code never
// checks for a missing TP or PP group; only Embedding() can be nil.
//
// It returns an error if s does not fit the world size (before any communication), if a
// Split fails, or if the transport returns a group other than the one the rank arithmetic
// predicts.
func NewMesh(ctx context.Context, world Comm, s Sizes) (*Mesh, error) {
	if world == nil {
		return nil, fmt.Errorf("parallel: NewMesh: nil world Comm")
	}
	s, err := s.Resolve(world.Size())
	if err != nil {
		return nil, err
	}
	rank := world.Rank()
	m := &Mesh{sizes: s, coord: s.Coord(rank), ecoord: s.ExpertCoord(rank), rank: rank, world: world}
	if err := m.splitAll(ctx, denseGroups); err != nil {
		return nil, err
	}
	emb := s.EmbeddingRanks(rank)
	color, members := -1, []int(nil)
	if m.IsFirstStage() || m.IsLastStage() {
		color, members = emb[0], emb
	}
	if m.emb, err = split(ctx, world, "embedding", color, members); err != nil {
		return nil, err
	}
	if err := m.splitAll(ctx, expertGroups); err != nil {
		return nil, err
	}
	return m, nil
}

// splitAll creates groups on m's world, in order, each rank passing its group's smallest
// member as the color.
func (m *Mesh) splitAll(ctx context.Context, groups []meshGroup) error {
	for _, g := range groups {
		members := g.members(m.sizes, m.rank)
		c, err := split(ctx, m.world, g.name, members[0], members)
		if err != nil {
			return err
		}
		*g.comm(m) = c
	}
	return nil
}

// split creates the group color on world and checks that it holds exactly members (world
// ranks, increasing), with this rank at its place; members is nil when color < 0.
func split(ctx context.Context, world Comm, name string, color int, members []int) (Comm, error) {
	rank := world.Rank()
	c, err := world.Split(ctx, name, color, rank)
	if err != nil {
		return nil, fmt.Errorf("parallel: NewMesh: creating group %s on rank %d: %w", name, rank, err)
	}
	if color < 0 {
		if c != nil {
			return nil, fmt.Errorf("parallel: NewMesh: rank %d got a group %s it should not be in", rank, name)
		}
		return nil, nil
	}
	bad := c == nil || c.Size() != len(members)
	for i := 0; !bad && i < len(members); i++ {
		bad = c.WorldRank(i) != world.WorldRank(members[i]) || (members[i] == rank) != (c.Rank() == i)
	}
	if bad {
		return nil, fmt.Errorf("parallel: NewMesh: rank %d: transport made group %s %s, want world ranks %v",
			rank, name, describeGroup(c), members)
	}
	return c, nil
}

// describeGroup formats a Comm's membership for errors.
func describeGroup(c Comm) string {
	if c == nil {
		return "nil"
	}
	ranks := make([]int, c.Size())
	for i := range ranks {
		ranks[i] = c.WorldRank(i)
	}
	return fmt.Sprintf("of world ranks %v with this rank at %d", ranks, c.Rank())
}

// World returns the world Comm the mesh was built on.
func (m *Mesh) World() Comm { return m.world }

// TP returns the tensor-parallel group.
func (m *Mesh) TP() Comm { return m.tp }

// CP returns the context-parallel group.
func (m *Mesh) CP() Comm { return m.cp }

// DP returns the data-parallel group: the ranks with the same TP, CP and PP coordinates.
func (m *Mesh) DP() Comm { return m.dp }

// DPCP returns the data-parallel group including context parallelism (over DP and CP),
// which reduces gradients when CP > 1; it equals DP() in membership when CP = 1.
func (m *Mesh) DPCP() Comm { return m.dpcp }

// PP returns the pipeline group; a rank's rank in it is its stage.
func (m *Mesh) PP() Comm { return m.pp }

// MP returns the model-parallel group (over TP and PP): the ranks that together hold one
// copy of the model.
func (m *Mesh) MP() Comm { return m.mp }

// Embedding returns the embedding group {first stage, last stage} of this rank's pipeline
// (just this rank when PP = 1), or nil on a middle stage, which is in no embedding group.
func (m *Mesh) Embedding() Comm { return m.emb }

// EP returns the expert-parallel group: the ranks with the same expert-TP, expert-DP and
// PP coordinates, each holding E/EP of a layer's E experts.
func (m *Mesh) EP() Comm { return m.ep }

// ExpertTP returns the expert-tensor-parallel group, which splits each expert's hidden
// size; it is TP's size unless Sizes.ETP says otherwise.
func (m *Mesh) ExpertTP() Comm { return m.etp }

// ExpertTPEP returns the group over expert-TP and EP (expert-TP fastest): the ranks that
// together hold every expert of a layer once.
func (m *Mesh) ExpertTPEP() Comm { return m.etpep }

// ExpertDP returns the expert-data-parallel group: the ranks holding the same expert
// shard, over which expert gradients are reduced; its size is Sizes().EDP().
func (m *Mesh) ExpertDP() Comm { return m.edp }

// ExpertMP returns the expert-model-parallel group (over expert-TP, EP and PP): the ranks
// that together hold one copy of the expert parameters, over which their gradient norm
// is summed.
func (m *Mesh) ExpertMP() Comm { return m.emp }

// TPDPCP returns the group over the dense TP, DP and CP axes: the ranks of one pipeline
// stage, which between them see every token of a step (Megatron's tp_dp_cp group, over
// which mixture-of-experts routers sum their token counts).
func (m *Mesh) TPDPCP() Comm { return m.tpdpcp }

// ExpertCoord returns this rank's coordinates in the expert decomposition.
func (m *Mesh) ExpertCoord() ExpertCoord { return m.ecoord }

// Sizes returns the resolved sizes.
func (m *Mesh) Sizes() Sizes { return m.sizes }

// Coord returns this rank's coordinates.
func (m *Mesh) Coord() Coord { return m.coord }

// Rank returns this rank's world rank.
func (m *Mesh) Rank() int { return m.rank }

// String describes the rank: "rank 5 of 16 (TP=2 CP=1 PP=4 DP=2) at tp=1 cp=0 dp=0 pp=1",
// followed by its expert coordinates when the expert layout is not the default one
// (EP > 1 or ETP ≠ TP): "rank 5 of 8 (TP=2 CP=1 PP=2 DP=2 EP=2) at tp=1 cp=0 dp=0 pp=1,
// etp=1 ep=0 edp=0 pp=1".
func (m *Mesh) String() string {
	s := fmt.Sprintf("rank %d of %d (%v) at %v", m.rank, m.sizes.World(), m.sizes, m.coord)
	if m.sizes.EP != 1 || m.sizes.ETP != m.sizes.TP {
		s += ", " + m.ecoord.String()
	}
	return s
}

// IsFirstStage reports whether this rank is on the first pipeline stage.
func (m *Mesh) IsFirstStage() bool { return m.coord.PP == 0 }

// IsLastStage reports whether this rank is on the last pipeline stage.
func (m *Mesh) IsLastStage() bool { return m.coord.PP == m.sizes.PP-1 }

// NextStage returns the PP-group rank of the next pipeline stage and true. On the last
// stage it returns the first stage, 0, and false: the ring neighbour that Megatron's p2p
// uses (an interleaved schedule passes a model chunk's output from the last stage to the
// first), with ok telling a non-interleaved schedule that there is no next stage.
func (m *Mesh) NextStage() (stage int, ok bool) {
	return (m.coord.PP + 1) % m.sizes.PP, !m.IsLastStage()
}

// PrevStage returns the PP-group rank of the previous pipeline stage and true. On the
// first stage it returns the last stage, PP-1, and false (see NextStage).
func (m *Mesh) PrevStage() (stage int, ok bool) {
	return (m.coord.PP + m.sizes.PP - 1) % m.sizes.PP, !m.IsFirstStage()
}

// TPSlice returns this rank's part of a dimension of size n split over the TP group:
// elements [start, start+size) with size = n/TP and start = tp·size. Random numbers for a
// TP-sharded tensor are drawn at these global indices, so every layout draws the same
// values for the same element. It panics if n is negative or not divisible by TP.
func (m *Mesh) TPSlice(n int) (start, size int) {
	if n < 0 || n%m.sizes.TP != 0 {
		panic(fmt.Sprintf("parallel: TPSlice: size %d not divisible by tp %d", n, m.sizes.TP))
	}
	size = n / m.sizes.TP
	return m.coord.TP * size, size
}

// SampleOffset returns the index, within a step's global batch, of the first sample of
// this rank's microbatch micro (0-based), in Megatron's order: the global batch is cut
// into chunks of microBatchSize·DP consecutive samples, one chunk per microbatch, and DP
// rank r takes the r-th microBatchSize samples of each, so microbatch i covers
// [(i·DP + r)·microBatchSize, +microBatchSize). TP, CP and PP ranks of one replica get the
// same offset: they work on the same samples. Add step·globalBatchSize for an offset into
// the whole run. It panics if microBatchSize < 1 or micro < 0.
func (m *Mesh) SampleOffset(microBatchSize, micro int) int {
	if microBatchSize < 1 || micro < 0 {
		panic(fmt.Sprintf("parallel: SampleOffset: micro-batch size %d and microbatch %d: need size ≥ 1 and index ≥ 0",
			microBatchSize, micro))
	}
	return (micro*m.sizes.DP + m.coord.DP) * microBatchSize
}
