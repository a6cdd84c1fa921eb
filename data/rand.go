package data

import (
	"hash/fnv"
	"math"
	"math/bits"
	"math/rand/v2"
)

// rng is the deterministic generator behind every random choice of the datasets: PCG-DXSM
// (math/rand/v2's PCG, whose output is fixed by its specification) with its 128-bit state
// derived from (seed, purpose, index) through splitmix64. Megatron draws from NumPy's
// MT19937; megago does not reproduce those permutations, only their properties.
//
// Bounded integers, floats, shuffles and geometric draws are implemented here rather
// than taken from rand.Rand so that the values depend on nothing but PCG's output.
//
// Purposes in use: "gpt" (document and shuffle indices), "sentence-mapping" (BERT and T5
// sample mappings), "bert-sample" and "t5-sample" (per-sample masking, indexed by the
// global sample index, so a sample is the same at any data-parallel size).
type rng struct{ src *rand.PCG }

// newRNG returns the generator for (seed, purpose, index).
func newRNG(seed uint64, purpose string, index uint64) *rng {
	h := fnv.New64a()
	h.Write([]byte(purpose))
	p := h.Sum64()
	return &rng{rand.NewPCG(splitmix64(seed^splitmix64(p)), splitmix64(index+p))}
}

// splitmix64 is Steele, Lea and Flood's 64-bit finaliser: a bijection that spreads nearby
// inputs over the whole range.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func (r *rng) uint64() uint64 { return r.src.Uint64() }

// uint64n returns a uniform integer in [0, n) by Lemire's multiply-and-reject method.
// It panics if n is 0.
func (r *rng) uint64n(n uint64) uint64 {
	if n == 0 {
		panic("data: rng.uint64n(0)")
	}
	hi, lo := bits.Mul64(r.src.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(r.src.Uint64(), n)
		}
	}
	return hi
}

// intn returns a uniform int in [0, n). It panics if n ≤ 0.
func (r *rng) intn(n int) int {
	if n <= 0 {
		panic("data: rng.intn of a non-positive bound")
	}
	return int(r.uint64n(uint64(n)))
}

// float64 returns a uniform float64 in [0, 1) with 53 random bits.
func (r *rng) float64() float64 { return float64(r.src.Uint64()>>11) * 0x1p-53 }

// shuffle permutes s uniformly (Fisher-Yates from the end).
func (r *rng) shuffle(s []int64) {
	for i := len(s) - 1; i > 0; i-- {
		j := r.uint64n(uint64(i + 1))
		s[i], s[j] = s[j], s[i]
	}
}

// geometric returns the number of Bernoulli(p) trials up to and including the first
// success: P(k) = (1−p)^(k−1)·p for k ≥ 1 (NumPy's geometric). It panics unless 0 < p ≤ 1.
func (r *rng) geometric(p float64) int {
	if !(p > 0 && p <= 1) {
		panic("data: rng.geometric needs 0 < p ≤ 1")
	}
	if p == 1 {
		return 1
	}
	u := 1 - r.float64() // (0, 1]
	k := math.Ceil(math.Log(u) / math.Log1p(-p))
	if k < 1 || math.IsNaN(k) {
		return 1
	}
	if k > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(k)
}
