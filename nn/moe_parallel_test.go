package nn

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	_ "megago/internal/fakedev" // registers the "fake" backend
	"megago/parallel"
	"megago/tensor"
)

// moeLayout is how a test spreads an MoE layer over goroutine ranks: dense TP (with
// sequence parallelism when tp > 1) × DP, and expert-TP × EP × expert-DP over the same
// ranks, each fastest first, as parallel.Mesh orders them.
type moeLayout struct {
	world, tp, ep, etp int
	noSP               bool // TP without sequence parallelism
}

// seqParts returns how many parts a rank's sequence is one of (tp under sequence
// parallelism) and which part rank r holds.
func (l moeLayout) seqParts(r int) (parts, index int) {
	if l.noSP {
		return 1, 0
	}
	return l.tp, r % l.tp
}

// groups splits world into rank's dense TP and DP groups and its expert groups.
func (l moeLayout) groups(ctx context.Context, world parallel.Comm) (tp, dp, edp parallel.Comm, g ExpertGroups, err error) {
	r := world.Rank()
	split := func(name string, color int) parallel.Comm {
		if err != nil {
			return nil
		}
		var c parallel.Comm
		c, err = world.Split(ctx, name, color, r)
		return c
	}
	tpep := l.etp * l.ep
	tp = split("tp", r/l.tp)
	dp = split("dp", r%l.tp)
	g.TP = split("etp", r/l.etp)
	g.EP = split("ep", (r/tpep)*l.etp+r%l.etp)
	g.TPEP = split("tpep", r/tpep)
	edp = split("edp", r%tpep)
	return tp, dp, edp, g, err
}

// moeRun is what a rank (or the single-rank reference) computed: the output, the input
// gradient and each parameter's gradient (summed over the ranks that share it), all as
// the rank's part of the global tensors.
type moeRun struct {
	y, dx   []float64
	grads   map[string][]float64
	regions map[string]tensor.Region // of each parameter's shard
}

// dropRule says whether a test drops the pair of global token g and expert e.
type dropRule func(g, e int) bool

// capacityDrop drops the pairs with (7·g + e) % 5 == 0: a capacity drop that does not
// depend on the layout.
func capacityDrop(g, e int) bool { return (7*g+e)%5 == 0 }

// emptyDrop drops every pair of the first 4 tokens (rank 0's in the tests) and of expert
// 3: ranks that send, or receive, no rows.
func emptyDrop(g, e int) bool { return g < 4 || e == 3 }

// dropPairs returns a route function that drops, after m's router, the (token, expert)
// pairs that drop says for global token index g = global(n) of local token n.
func dropPairs(m *MoE, drop dropRule, global func(n int) int) func(p *Pass, x *tensor.Tensor) Routing {
	route := m.route
	return func(p *Pass, x *tensor.Tensor) Routing {
		r := route(p, x)
		keep := make([]float64, len(r.Map))
		for i := range r.Map {
			if n, e := i/m.experts, i%m.experts; drop(global(n), e) {
				r.Map[i] = false
			} else {
				keep[i] = 1
			}
		}
		r.Probs = tensor.Mul(r.Probs, tensor.FromSlice(x.Device(), keep, r.Probs.Shape()...).Cast(r.Probs.DType()))
		return r
	}
}

// runMoE runs an MoE layer of cfg on this rank's part of x and gy ([B·dp, T, C]
// globally): batch rows of its DP index, sequence chunk of its TP index, and returns the
// rank's results, parameter gradients summed over the ranks sharing them.
func runMoE(ctx context.Context, cfg TransformerConfig, l moeLayout, world parallel.Comm, x, gy []float64, shape tensor.Shape, drop dropRule) (moeRun, error) {
	tp, dp, edp, g, err := l.groups(ctx, world)
	if err != nil {
		return moeRun{}, err
	}
	dev := tensor.NewCPU()
	parts, index := l.seqParts(world.Rank())
	b := &Builder{Dev: dev, DType: tensor.F64, RNG: tensor.NewRNG(13), TP: tp, SequenceParallel: parts > 1, Experts: g}
	m := NewMoE(b, "layers.0.mlp", cfg)
	setBiases(m)
	bsz, seq := shape[0]/dp.Size(), shape[1]/parts
	b0, t0 := dp.Rank()*bsz, index*seq
	part := func(v []float64) *tensor.Tensor {
		return narrowTo(tensor.FromSlice(dev, v, shape...), []int{b0, t0, 0}, tensor.Shape{bsz, seq, shape[2]})
	}
	if drop != nil { // routing is per sequence chunk under TP, sequence parallel or not
		rseq, rt0 := shape[1]/l.tp, (world.Rank()%l.tp)*(shape[1]/l.tp)
		m.route = dropPairs(m, drop, func(n int) int { return (b0+n/rseq)*shape[1] + rt0 + n%rseq })
	}
	xs := part(x)
	xs.SetRequiresGrad(true)
	y := m.Forward(Eval(ctx), xs)
	y.BackwardWithGrad(part(gy))
	run := moeRun{y: tensor.ToSlice[float64](y), dx: tensor.ToSlice[float64](xs.Grad()), grads: map[string][]float64{}, regions: map[string]tensor.Region{}}
	for _, p := range m.Params() {
		gr := tensor.ZerosLike(p.Tensor) // an expert without tokens gets no gradient
		if p.Grad() != nil {
			gr = p.Grad().Clone()
		}
		groups := []parallel.Comm{dp}
		switch {
		case p.Expert:
			groups = []parallel.Comm{edp}
		case p.SequenceParallel:
			groups = append(groups, tp)
		}
		for _, c := range groups {
			if err := c.AllReduce(ctx, gr, parallel.Sum); err != nil {
				return run, err
			}
		}
		run.grads[p.Name] = tensor.ToSlice[float64](gr)
		run.regions[p.Name] = p.Region()
	}
	return run, nil
}

// narrowTo returns the region of x starting at start with size size.
func narrowTo(x *tensor.Tensor, start []int, size tensor.Shape) *tensor.Tensor {
	for d := range start {
		x = x.Narrow(d, start[d], size[d])
	}
	return x.Clone()
}

// TestMoEExpertParallelEquivalence checks that an MoE layer spread over goroutine ranks
// (EP, expert-TP, sequence-parallel TP, DP) computes the single-rank layer's outputs and
// gradients, for both dispatchers, with and without dropping tokens.
func TestMoEExpertParallelEquivalence(t *testing.T) {
	const bsz, seq, c = 4, 4, 8
	shape := tensor.Shape{bsz, seq, c}
	x, gy := seqValues(shape.Numel(), 1), seqValues(shape.Numel(), 2)
	type tcase struct {
		l     moeLayout
		mc    MoEConfig
		drop  dropRule
		exact bool // bitwise: with top-2 and one expert-TP rank every sum has the single-rank operands in the same order
	}
	var cases []tcase
	for _, d := range []string{"allgather", "alltoall"} {
		// drop alternates between the dispatchers where a layout has one case.
		drop := map[bool]dropRule{true: capacityDrop}
		cases = append(cases,
			tcase{moeLayout{2, 1, 2, 1, false}, MoEConfig{Dispatcher: d}, nil, true},
			tcase{moeLayout{2, 1, 2, 1, false}, MoEConfig{Dispatcher: d, GroupedGEMM: true}, capacityDrop, true},
			tcase{moeLayout{4, 1, 4, 1, false}, MoEConfig{Dispatcher: d, SharedExpertFFNHidden: 10, SharedExpertGate: true}, capacityDrop, true},
			tcase{moeLayout{4, 1, 4, 1, false}, MoEConfig{Dispatcher: d, GroupedGEMM: true}, emptyDrop, true},
			tcase{moeLayout{4, 2, 2, 2, false}, MoEConfig{Dispatcher: d, SharedExpertFFNHidden: 10}, drop[d == "alltoall"], false},
			tcase{moeLayout{4, 2, 2, 2, false}, MoEConfig{Dispatcher: d}, emptyDrop, false},
			tcase{moeLayout{4, 2, 2, 1, false}, MoEConfig{Dispatcher: d, GroupedGEMM: true}, drop[d == "allgather"], false},
			tcase{moeLayout{2, 2, 1, 2, true}, MoEConfig{Dispatcher: d, SharedExpertFFNHidden: 10, SharedExpertGate: true}, drop[d == "allgather"], false},
		)
	}
	for _, tc := range cases {
		l := tc.l
		drop := map[bool]string{true: "none"}[tc.drop == nil]
		switch {
		case tc.drop != nil && tc.drop(0, 3) && tc.drop(9, 3):
			drop = "empty-ranks"
		case tc.drop != nil:
			drop = "capacity"
		}
		name := fmt.Sprintf("%s/world%d-tp%d-sp=%v-ep%d-etp%d/grouped=%v/shared=%v/drop=%s", tc.mc.Dispatcher, l.world, l.tp, !l.noSP, l.ep, l.etp, tc.mc.GroupedGEMM, tc.mc.SharedExpertFFNHidden > 0, drop)
		t.Run(name, func(t *testing.T) {
			cfg := moeTestConfig(GeLU, true, tc.mc)
			ref := onRanks(t, 1, func(c parallel.Comm, _ *tensor.Device) (moeRun, error) {
				return runMoE(context.Background(), cfg, moeLayout{1, 1, 1, 1, false}, c, x, gy, shape, tc.drop)
			})[0]
			runs := onRanks(t, l.world, func(c parallel.Comm, _ *tensor.Device) (moeRun, error) {
				return runMoE(context.Background(), cfg, l, c, x, gy, shape, tc.drop)
			})
			checkMoERuns(t, l, shape, ref, runs, tc.exact)
		})
	}
}

// checkMoERuns compares each rank's run with its part of the single-rank reference:
// outputs, input gradients and expert gradients bit for bit when exact, the others
// (and all with expert-TP) within rounding.
func checkMoERuns(t *testing.T, l moeLayout, shape tensor.Shape, ref moeRun, runs []moeRun, exact bool) {
	t.Helper()
	dev := tensor.NewCPU()
	for r, run := range runs {
		parts, index := l.seqParts(r)
		bsz, seq := shape[0]*l.tp/l.world, shape[1]/parts
		b0, t0 := (r/l.tp)*bsz, index*seq
		part := func(v []float64) []float64 {
			return tensor.ToSlice[float64](narrowTo(tensor.FromSlice(dev, v, shape...), []int{b0, t0, 0}, tensor.Shape{bsz, seq, shape[2]}))
		}
		// Reordered sums (over tokens split across ranks, over expert-TP partials) in fp64.
		const tol = 1e-12
		same := func(what string, want, got []float64, bitwise bool) {
			t.Helper()
			if bitwise {
				require.Equal(t, want, got, "rank %d %s", r, what)
				return
			}
			require.InDeltaSlice(t, want, got, tol, "rank %d %s", r, what)
		}
		same("output", part(ref.y), run.y, exact)
		same("input gradient", part(ref.dx), run.dx, exact)
		require.Len(t, run.grads, len(ref.grads))
		for name, g := range run.grads {
			reg := run.regions[name]
			full := tensor.FromSlice(dev, ref.grads[name], ref.regions[name].Size...)
			want := tensor.ToSlice[float64](narrowTo(full, reg.Start, reg.Size))
			same(name+" gradient", want, g, exact && strings.Contains(name, ".experts."))
		}
	}
}

// TestMoEOnEveryBackend runs the layer over 2 EP ranks on each registered backend (the
// in-tree "fake" device keeps its memory apart from the host, as a GPU does) and checks
// the outputs and input gradients against the single-rank CPU layer (with
// MEGAGO_CUDA_EMU=1 and package cuda imported, the CUDA kernels run too).
func TestMoEOnEveryBackend(t *testing.T) {
	const bsz, seq, c = 2, 3, 8
	shape := tensor.Shape{bsz, seq, c}
	x, gy := seqValues(shape.Numel(), 4), seqValues(shape.Numel(), 5)
	cfg := moeTestConfig(SwiGLU, true, MoEConfig{Dispatcher: "alltoall", GroupedGEMM: true})
	run := func(dev func() *tensor.Device, n int) []moeRun {
		return onRanks(t, n, func(world parallel.Comm, _ *tensor.Device) (moeRun, error) {
			g := ExpertGroups{EP: world, TPEP: world}
			b := &Builder{Dev: dev(), DType: tensor.F64, RNG: tensor.NewRNG(13), TP: parallel.Self(), Experts: g}
			m := NewMoE(b, "layers.0.mlp", cfg)
			setBiases(m)
			xs := tensor.FromSlice(b.Dev, x, shape...).SetRequiresGrad(true)
			y := m.Forward(Eval(context.Background()), xs)
			y.BackwardWithGrad(tensor.FromSlice(b.Dev, gy, shape...))
			return moeRun{y: tensor.ToSlice[float64](y), dx: tensor.ToSlice[float64](xs.Grad())}, nil
		})
	}
	want := run(tensor.NewCPU, 1)[0]
	for _, name := range tensor.Backends() {
		t.Run(name, func(t *testing.T) {
			if _, err := tensor.Open(name); err != nil {
				t.Skipf("needs backend %s: %v", name, err)
			}
			open := func() *tensor.Device { d, _ := tensor.Open(name); return d }
			for r, got := range run(open, 2) {
				// A GPU backend's GEMMs round differently from the CPU's.
				const tol = 1e-12
				require.InDeltaSlice(t, want.y, got.y, tol, "rank %d output", r)
				require.InDeltaSlice(t, want.dx, got.dx, tol, "rank %d input gradient", r)
			}
		})
	}
}

// padPairs returns a route function that pads, after m's router, every expert's rows to
// capacity cap with tokens not routed to it (probability 0), as the router does with
// MoEConfig.PadToCapacity.
func padPairs(m *MoE, capacity int) func(p *Pass, x *tensor.Tensor) Routing {
	route := m.route
	return func(p *Pass, x *tensor.Tensor) Routing {
		r := route(p, x)
		e := m.experts
		for j := range e {
			rows := 0
			for i := j; i < len(r.Map); i += e {
				if r.Map[i] {
					rows++
				}
			}
			for i := j; i < len(r.Map) && rows < capacity; i += e {
				if !r.Map[i] {
					r.Map[i] = true
					rows++
				}
			}
		}
		return r
	}
}

// TestMoEPaddingChangesNothing checks that rows padded to capacity (probability 0)
// leave outputs and input gradients as they are, bit for bit, over 2 EP ranks.
func TestMoEPaddingChangesNothing(t *testing.T) {
	const bsz, seq, c = 2, 4, 8
	shape := tensor.Shape{bsz, seq, c}
	x, gy := seqValues(shape.Numel(), 7), seqValues(shape.Numel(), 8)
	for _, d := range []string{"allgather", "alltoall"} {
		t.Run(d, func(t *testing.T) {
			cfg := moeTestConfig(GeLU, true, MoEConfig{Dispatcher: d})
			run := func(capacity int) []moeRun {
				return onRanks(t, 2, func(world parallel.Comm, dev *tensor.Device) (moeRun, error) {
					b := &Builder{Dev: dev, DType: tensor.F64, RNG: tensor.NewRNG(13), TP: parallel.Self(), Experts: ExpertGroups{EP: world, TPEP: world}}
					m := NewMoE(b, "layers.0.mlp", cfg)
					if capacity > 0 {
						m.route = padPairs(m, capacity)
					}
					xs := tensor.FromSlice(dev, x, shape...).SetRequiresGrad(true)
					y := m.Forward(Eval(context.Background()), xs)
					y.BackwardWithGrad(tensor.FromSlice(dev, gy, shape...))
					return moeRun{y: tensor.ToSlice[float64](y), dx: tensor.ToSlice[float64](xs.Grad())}, nil
				})
			}
			// 8 tokens × top 2 over 4 experts: capacity 6 pads every expert.
			want, got := run(0), run(6)
			for r := range want {
				require.Equal(t, want[r].y, got[r].y, "rank %d output", r)
				require.Equal(t, want[r].dx, got[r].dx, "rank %d input gradient", r)
			}
		})
	}
}

// TestMoEUnevenSequenceInference: under TP without sequence parallelism, a sequence
// whose length TP does not divide (a generation step of one token, an odd prompt) is
// routed whole on every TP rank in inference; each rank's output and input gradient
// equal the single-rank layer's, for both dispatchers with expert-TP and EP.
func TestMoEUnevenSequenceInference(t *testing.T) {
	for _, d := range []string{"allgather", "alltoall"} {
		for _, seq := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/seq%d", d, seq), func(t *testing.T) {
				shape := tensor.Shape{2, seq, 8}
				x, gy := seqValues(shape.Numel(), 1), seqValues(shape.Numel(), 2)
				cfg := moeTestConfig(GeLU, true, MoEConfig{Dispatcher: d, SharedExpertFFNHidden: 10})
				ref := onRanks(t, 1, func(c parallel.Comm, _ *tensor.Device) (moeRun, error) {
					return runMoE(context.Background(), cfg, moeLayout{1, 1, 1, 1, false}, c, x, gy, shape, nil)
				})[0]
				l := moeLayout{4, 2, 2, 2, true}
				runs := onRanks(t, l.world, func(c parallel.Comm, _ *tensor.Device) (moeRun, error) {
					return runMoE(context.Background(), cfg, l, c, x, gy, shape, nil)
				})
				for r, run := range runs {
					bsz := shape[0] * l.tp / l.world
					part := func(v []float64) []float64 {
						return v[(r/l.tp)*bsz*seq*8 : (r/l.tp+1)*bsz*seq*8]
					}
					require.InDeltaSlice(t, part(ref.y), run.y, 1e-12, "rank %d output", r)
					require.InDeltaSlice(t, part(ref.dx), run.dx, 1e-12, "rank %d input gradient", r)
				}
			})
		}
	}
}
