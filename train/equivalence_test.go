package train

import (
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/nn"
)

// The 3-D equivalence matrix: a tiny GPT with dropout trained for 10 steps on TP ∈ {1,2}
// × PP ∈ {1,2,4} × DP ∈ {1,2}, under 1F1B and the interleaved schedule, with and without
// sequence parallelism and recomputation, reaches the losses and parameters of one rank
// with the same global batch.
//
// Two kinds of comparison:
//   - bit for bit, within a class of runs with the same TP, DP and SP: pipelining (PP and
//     the schedule) and recomputation change where and when the arithmetic happens, not
//     the arithmetic itself (the model is untied: a tied embedding's gradient is summed
//     across stages in another order);
//   - within tolerance, each class against TP=PP=DP=1 (see matrixTol).
//
// By default the matrix runs a pairwise-covering subset of the valid combinations (every
// pair of settings of two axes appears in some run); MEGAGO_FULL_MATRIX=1 runs all 90.

const matrixSteps = 10

// matrixTol bounds the difference to the single-rank run after 10 AdamW steps: TP
// all-reduces and DP averaging reorder float64 sums (relative error ~1e-16 per op), and
// Adam's normalization m/√v lets such differences in small gradients grow over steps.
// Observed: at most 4e-14 on parameters.
const matrixTol = 1e-11

// axes of the matrix and their values.
var matrixAxes = []struct {
	name   string
	values int
}{{"tp", 2}, {"pp", 3}, {"dp", 2}, {"sched", 2}, {"sp", 2}, {"rec", 3}}

// matrixLayout maps one value index per axis to a layout, or false if invalid.
func matrixLayout(v []int) (layout, bool) {
	l := layout{tp: 1 + v[0], pp: []int{1, 2, 4}[v[1]], dp: 1 + v[2], interleaved: v[3] == 1, sp: v[4] == 1,
		rec: []nn.Recompute{nn.RecomputeNone, nn.RecomputeFull, nn.RecomputeSelective}[v[5]]}
	if l.pp == 1 && l.interleaved || l.tp == 1 && l.sp {
		return l, false
	}
	return l, true
}

// allLayouts enumerates every valid combination with its value indices.
func allLayouts() (ls []layout, vals [][]int) {
	var rec func(v []int)
	rec = func(v []int) {
		if len(v) == len(matrixAxes) {
			if l, ok := matrixLayout(v); ok {
				ls, vals = append(ls, l), append(vals, append([]int(nil), v...))
			}
			return
		}
		for i := range matrixAxes[len(v)].values {
			rec(append(v, i))
		}
	}
	rec(nil)
	return ls, vals
}

// pairwise picks layouts greedily until every pair of (axis, value) settings that occurs
// in some valid layout occurs in a picked one.
func pairwise(ls []layout, vals [][]int) []layout {
	type pair struct{ a, va, b, vb int }
	pairs := func(v []int) []pair {
		var ps []pair
		for a := range v {
			for b := a + 1; b < len(v); b++ {
				ps = append(ps, pair{a, v[a], b, v[b]})
			}
		}
		return ps
	}
	uncovered := map[pair]bool{}
	for _, v := range vals {
		for _, p := range pairs(v) {
			uncovered[p] = true
		}
	}
	var picked []layout
	for len(uncovered) > 0 {
		best, bestN := -1, 0
		for i, v := range vals {
			n := 0
			for _, p := range pairs(v) {
				if uncovered[p] {
					n++
				}
			}
			if n > bestN {
				best, bestN = i, n
			}
		}
		for _, p := range pairs(vals[best]) {
			delete(uncovered, p)
		}
		picked = append(picked, ls[best])
	}
	return picked
}

// classOf is the bit-identical class: runs that differ only in PP, schedule and
// recomputation.
func classOf(l layout) layout { return layout{tp: l.tp, pp: 1, dp: l.dp, sp: l.sp} }

func TestGPT3DMatrix(t *testing.T) {
	all, vals := allLayouts()
	require.Len(t, all, 90)
	runs := pairwise(all, vals)
	if os.Getenv("MEGAGO_FULL_MATRIX") != "" {
		runs = all
	}
	ref := train3D(t, layout{tp: 1, pp: 1, dp: 1}, matrixSteps)
	require.Less(t, ref.Loss[matrixSteps-1], ref.Loss[0]-0.2, "the model learns")
	classes := map[layout]outcome{classOf(layout{tp: 1, pp: 1, dp: 1}): ref}
	for _, l := range runs {
		c := classOf(l)
		if _, ok := classes[c]; ok {
			continue
		}
		t.Run("class/"+c.String(), func(t *testing.T) {
			got := train3D(t, c, matrixSteps)
			classes[c] = got
			compareTol(t, ref, got)
			t.Logf("largest parameter difference to TP=PP=DP=1: %.3g", maxDiff(ref, got))
		})
	}
	for _, l := range runs {
		t.Run(l.String(), func(t *testing.T) {
			got := train3D(t, l, matrixSteps)
			compareExact(t, classes[classOf(l)], got)
		})
	}
}

// compareExact asserts that got equals want bit for bit: losses, parameters, the modules'
// state and, where both runs recorded them, the gradients.
func compareExact(t *testing.T, want, got outcome) {
	t.Helper()
	assert.Equal(t, want.Loss, got.Loss, "step losses")
	assert.Equal(t, want.Micro, got.Micro, "micro-batch losses")
	assert.Equal(t, want.State, got.State, "module state")
	require.Len(t, got.Params, len(want.Params))
	for k, w := range want.Params {
		if !assert.Equal(t, w, got.Params[k], "parameter %s", k) {
			return
		}
	}
	for i, g := range got.Grads {
		if len(g) > 0 && len(want.Grads[i]) > 0 && !assert.Equal(t, want.Grads[i], g, "step %d gradients", i) {
			return
		}
	}
}

// compareTol compares a run with a reference (one rank, or a layout whose shards hold
// the run's) within matrixTol: losses, every parameter shard and, where both runs
// recorded them, every step's gradients against the same region of the reference's,
// and the modules' state.
func compareTol(t *testing.T, ref, got outcome) {
	t.Helper()
	assert.InDeltaSlice(t, ref.Loss, got.Loss, matrixTol, "step losses")
	compareShards(t, ref, ref.Params, got, got.Params, "parameter")
	for i, g := range got.Grads {
		if len(g) > 0 && len(ref.Grads[i]) > 0 {
			compareShards(t, ref, ref.Grads[i], got, g, fmt.Sprintf("step %d gradient of", i))
		}
	}
	require.Len(t, got.State, len(ref.State))
	for k, w := range ref.State {
		assert.InDeltaSlice(t, w, got.State[k], matrixTol, "state %s", k)
	}
}

// compareShards compares each shard of got's values with the same region of ref's, and
// checks that they cover every reference element.
func compareShards(t *testing.T, ref outcome, want map[string][]float64, got outcome, vals map[string][]float64, what string) {
	t.Helper()
	n := 0
	for k, g := range vals {
		w := refPart(ref, want, splitKey(k), got.Regions[k])
		require.NotNil(t, w, "%s %s: no reference shard holds it", what, k)
		if !assert.InDeltaSlice(t, w, g, matrixTol, "%s %s", what, k) {
			return
		}
		n += len(g)
	}
	total := 0
	for _, w := range want {
		total += len(w)
	}
	assert.GreaterOrEqual(t, n, total, "every reference element compared")
}

// maxDiff is the largest absolute difference between a run's parameters and the
// reference's (logged, to show how much room matrixTol leaves).
func maxDiff(ref, got outcome) float64 {
	d := 0.0
	for k, g := range got.Params {
		want := refPart(ref, ref.Params, splitKey(k), got.Regions[k])
		for i, v := range g {
			d = math.Max(d, math.Abs(v-want[i]))
		}
	}
	return d
}
