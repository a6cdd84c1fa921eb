package data

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Split names one of the three parts of a dataset that Megatron's --split divides.
type Split int

// The three splits, in the order of the --split weights.
const (
	SplitTrain Split = iota
	SplitValid
	SplitTest
)

// String returns "train", "valid" or "test".
func (s Split) String() string {
	switch s {
	case SplitTrain:
		return "train"
	case SplitValid:
		return "valid"
	case SplitTest:
		return "test"
	}
	return "Split(" + strconv.Itoa(int(s)) + ")"
}

// DefaultSplit is Megatron's default --split.
const DefaultSplit = "969,30,1"

// ParseSplit parses Megatron's --split: one to three non-negative weights separated by
// commas or slashes, missing weights being 0, normalised to sum to 1. "969,30,1" gives
// [0.969 0.03 0.001]; "" gives DefaultSplit's weights.
func ParseSplit(s string) ([3]float64, error) {
	var w [3]float64
	if strings.TrimSpace(s) == "" {
		s = DefaultSplit
	}
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '/' })
	if len(fields) == 0 || len(fields) > 3 {
		return w, fmt.Errorf("data: split %q: want 1 to 3 weights", s)
	}
	sum := 0.0
	for i, f := range fields {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return w, fmt.Errorf("data: split %q: weight %d %q is not a non-negative number", s, i, f)
		}
		w[i] = v
		sum += v
	}
	if sum <= 0 {
		return w, fmt.Errorf("data: split %q: weights sum to 0", s)
	}
	for i := range w {
		w[i] /= sum
	}
	return w, nil
}

// SplitBoundaries returns where the splits of n elements start and end: split k is
// [b[k], b[k+1]). As Megatron does, each split gets round(w_k·n) elements, rounding half
// to even, the boundaries are their running sums, and the rounding excess b[3] − n is
// then taken off every boundary after the first, so b[0] = 0 and b[3] = n. Boundaries
// are finally clamped to [0, n] and made non-decreasing (only extreme weights on tiny n
// need it). It panics if n < 0.
func SplitBoundaries(w [3]float64, n int) [4]int {
	if n < 0 {
		panic(fmt.Sprintf("data: SplitBoundaries: n = %d < 0", n))
	}
	var b [4]int
	for k := range w {
		b[k+1] = b[k] + int(math.RoundToEven(w[k]*float64(n)))
	}
	diff := b[3] - n
	for k := 1; k < 4; k++ {
		b[k] = min(max(b[k]-diff, b[k-1]), n)
	}
	b[3] = n
	return b
}

// splitRange parses split and returns split part's range of n elements. Its error names
// the split string.
func splitRange(split string, part Split, n int) (lo, hi int, w [3]float64, err error) {
	if part < SplitTrain || part > SplitTest {
		return 0, 0, w, fmt.Errorf("data: unknown split %v", part)
	}
	w, err = ParseSplit(split)
	if err != nil {
		return 0, 0, w, err
	}
	b := SplitBoundaries(w, n)
	return b[part], b[part+1], w, nil
}
