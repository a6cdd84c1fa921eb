package modelflags

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"megago/nn"
)

// CP holds Megatron's context-parallel flags (megatron/training/arguments.py):
// --context-parallel-size, --cp-comm-type (nargs='+': one type for every layer or one
// per layer) and --hierarchical-context-parallel-sizes (nargs='+' ints, needed by
// a2a+p2p), which Apply maps onto nn.TransformerConfig's CP, CPCommType and
// CPHierarchy. Both lists take Megatron's space-separated words (CPListFlags, for
// listargs.Join) or comma-separated values.
type CP struct {
	Size      int      // --context-parallel-size (1)
	CommType  []string // --cp-comm-type, one word per value (empty: p2p)
	Hierarchy []int    // --hierarchical-context-parallel-sizes (empty: none)
}

// CPListFlags are the flags of CP that take Megatron's lists of words.
var CPListFlags = []string{"cp-comm-type", "hierarchical-context-parallel-sizes"}

// cpCommTypes are the accepted --cp-comm-type values (Megatron's code spells the
// gathered one both ways).
var cpCommTypes = []string{"p2p", "all_gather", "allgather", "a2a", "a2a+p2p"}

// CPDefaults returns Megatron's defaults: one rank, p2p.
func CPDefaults() CP { return CP{Size: 1} }

// Register registers the flags on fs with c's values as their defaults.
func (c *CP) Register(fs *flag.FlagSet) {
	fs.IntVar(&c.Size, "context-parallel-size", c.Size, "context-parallel size (CP): each sample's sequence is split over CP ranks (2·CP load-balanced chunks)")
	fs.Var((*words)(&c.CommType), "cp-comm-type", "how attention exchanges keys and values over the CP group: p2p (ring), all_gather (allgather), a2a (heads for positions) or a2a+p2p; one for every layer or one per layer (default p2p)")
	fs.Var((*ints)(&c.Hierarchy), "hierarchical-context-parallel-sizes", "with --cp-comm-type a2a+p2p: the a2a size, then the p2p size (their product is --context-parallel-size)")
}

// Check returns a message for each CP flag value that cannot work for model m (its
// layers, heads and key/value heads) at tensor-parallel size tp with sequences of seq
// tokens, split over TP as well with sequence parallelism (sp), in the flags' words
// (Megatron's where it has them).
func (c CP) Check(m nn.TransformerConfig, tp, seq int, sp bool) []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if c.Size < 1 {
		return []string{fmt.Sprintf("--context-parallel-size must be at least 1, got %d", c.Size)}
	}
	for _, t := range c.CommType {
		if !contains(cpCommTypes, t) {
			bad("--cp-comm-type %q: want %s", t, strings.Join(cpCommTypes, ", "))
		}
	}
	if n := len(c.CommType); n > 1 && n != m.NumLayers {
		bad("--cp-comm-type has %d values and --num-layers is %d: give one for every layer, or one per layer (Length of cp_comm_type should equal to the total number of transformer layers)", n, m.NumLayers)
	}
	errs = append(errs, c.checkHierarchy()...)
	if c.Size == 1 || len(errs) > 0 {
		return errs
	}
	if div := 2 * c.Size; !sp && seq%div != 0 {
		bad("--seq-length %d is not divisible by 2 × --context-parallel-size %d (each sequence is cut into 2·CP chunks, rank r holding chunks r and 2·CP−1−r)", seq, c.Size)
	} else if div *= tp; sp && seq%div != 0 {
		bad("--seq-length %d is not divisible by 2 × --context-parallel-size %d × --tensor-model-parallel-size %d (2·CP chunks, each split over TP by --sequence-parallel)", seq, c.Size, tp)
	}
	errs = append(errs, c.checkHeads(m, tp)...)
	return errs
}

// checkHierarchy checks --hierarchical-context-parallel-sizes against the size and
// the comm types.
func (c CP) checkHierarchy() []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if len(c.Hierarchy) > 0 {
		prod := 1
		for _, s := range c.Hierarchy {
			prod *= s
			if s < 1 {
				bad("--hierarchical-context-parallel-sizes %s: each size must be at least 1", ints(c.Hierarchy).String())
				return errs
			}
		}
		if prod != c.Size {
			bad("--hierarchical-context-parallel-sizes %s: their product %d is not --context-parallel-size %d", ints(c.Hierarchy).String(), prod, c.Size)
		}
	}
	if contains(c.CommType, "a2a+p2p") {
		switch {
		case len(c.Hierarchy) == 0:
			bad("--hierarchical-context-parallel-sizes must be set when a2a+p2p is used in cp comm (--cp-comm-type a2a+p2p)")
		case len(c.Hierarchy) != 2:
			bad("--hierarchical-context-parallel-sizes %s: --cp-comm-type a2a+p2p wants two sizes, the a2a size then the p2p size", ints(c.Hierarchy).String())
		}
	}
	return errs
}

// checkHeads checks that the a2a exchanges split whole heads: each TP rank's query
// heads and key/value heads must divide by the a2a size (CP for a2a, the first
// hierarchical size for a2a+p2p).
func (c CP) checkHeads(m nn.TransformerConfig, tp int) []string {
	m = m.Defaults()
	var errs []string
	for _, a2a := range []struct {
		kind string
		size int
	}{{"a2a", c.Size}, {"a2a+p2p", c.a2aSize()}} {
		if !contains(c.CommType, a2a.kind) || tp < 1 || m.Heads%tp != 0 || m.KVHeads%tp != 0 {
			continue
		}
		if h, g := m.Heads/tp, m.KVHeads/tp; h%a2a.size != 0 || g%a2a.size != 0 {
			errs = append(errs, fmt.Sprintf("--cp-comm-type %s: each TP rank's %d attention heads and %d key/value heads must divide by the all-to-all size %d (--num-attention-heads %d, --num-query-groups %d, TP %d)",
				a2a.kind, h, g, a2a.size, m.Heads, m.KVHeads, tp))
		}
	}
	return errs
}

// a2aSize returns the all-to-all size of a2a+p2p: the first hierarchical size (1 if
// none is given).
func (c CP) a2aSize() int {
	if len(c.Hierarchy) == 0 {
		return 1
	}
	return c.Hierarchy[0]
}

// Apply sets c's fields of m: CP, CPCommType and CPHierarchy, comma-separated.
// Call Check first.
func (c CP) Apply(m *nn.TransformerConfig) {
	m.CP = c.Size
	m.CPCommType = strings.Join(c.CommType, ",")
	m.CPHierarchy = strings.Join(strings.Fields(ints(c.Hierarchy).String()), ",")
}

// Describe returns the settings in a few words ("CP 4, a2a+p2p 2×2"), or "" for one
// rank.
func (c CP) Describe() string {
	if c.Size <= 1 {
		return ""
	}
	kind := "p2p"
	if len(c.CommType) > 0 {
		kind = strings.Join(c.CommType, ",")
	}
	s := fmt.Sprintf("CP %d, %s", c.Size, kind)
	if len(c.Hierarchy) > 0 {
		s += " " + strings.ReplaceAll(ints(c.Hierarchy).String(), " ", "×")
	}
	return s
}

func contains(list []string, v string) bool {
	for _, w := range list {
		if w == v {
			return true
		}
	}
	return false
}

// words is a list flag of words, separated by spaces or commas; each Set appends.
type words []string

func (w *words) String() string { return strings.Join(*w, " ") }

func (w *words) Set(s string) error {
	*w = append(*w, strings.FieldsFunc(s, isListSep)...)
	return nil
}

// ints is a list flag of integers, separated by spaces or commas; each Set appends.
type ints []int

func (v ints) String() string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, " ")
}

func (v *ints) Set(s string) error {
	for _, f := range strings.FieldsFunc(s, isListSep) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("%q is not an integer", f)
		}
		*v = append(*v, n)
	}
	return nil
}

func isListSep(r rune) bool { return r == ' ' || r == ',' }
