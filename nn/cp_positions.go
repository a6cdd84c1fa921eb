package nn

import "fmt"

// CPPositions returns the global sequence positions that context-parallel rank r of cp
// holds of a sequence of t positions, in the order it holds them: Megatron's load
// balancing for causal attention cuts the sequence into 2·cp chunks of t/(2·cp) and
// gives rank r chunks r and 2·cp−1−r, so every rank has as many early (cheap) as late
// (expensive) queries. With cp = 1 it is 0..t−1. It panics if t is not a positive
// multiple of 2·cp (cp > 1) or r is outside [0, cp).
func CPPositions(t, cp, r int) []int {
	if cp < 1 || r < 0 || r >= cp || t < 1 || (cp > 1 && t%(2*cp) != 0) {
		panic(fmt.Sprintf("nn: CPPositions: sequence %d, context-parallel rank %d of %d: need 0 ≤ rank < cp and the sequence a positive multiple of 2·cp", t, r, cp))
	}
	if cp == 1 {
		pos := make([]int, t)
		for i := range pos {
			pos[i] = i
		}
		return pos
	}
	n := t / (2 * cp)
	pos := make([]int, 0, 2*n)
	for _, c := range []int{r, 2*cp - 1 - r} {
		for i := range n {
			pos = append(pos, c*n+i)
		}
	}
	return pos
}
