package tensor

import (
	"fmt"
	"hash/fnv"
	"math"
)

// RNG is a key for the counter-based Philox-4x32-10 generator (Salmon et al., "Parallel
// random numbers: as easy as 1, 2, 3", SC'11). It holds no state: the random bits of an
// element come from Philox(key, counter) where the counter is the element's linear index
// in the full (unsharded) tensor, so a shard draws exactly the values of the same elements
// of the whole tensor, on every backend, in any call order, at any parallel layout.
//
// Keys are derived from a seed and from the coordinates that make a draw distinct
// (purpose, layer, step, micro-batch, ...) with Fold and Named, never from a rank.
//
// Per element, bits are taken as follows (fixed, so other backends can reproduce them):
// Uniform and Bernoulli element i uses words 2(i mod 2) and 2(i mod 2)+1 of block i/2,
// forming a 53-bit fraction u = (w0·2^21 + w1>>11)·2^-53 in [0, 1); Normal element i uses
// all of block i: u1 from words 0,1 and u2 from words 2,3, z = √(−2 ln(1−u1))·cos(2π u2).
type RNG struct {
	key [2]uint32
}

// NewRNG returns the generator key for a seed.
func NewRNG(seed uint64) RNG { return RNG{}.Fold(seed) }

// Fold returns a key derived from r and the given coordinates (for example a purpose
// number, a layer index and a step). Different coordinates give independent streams.
func (r RNG) Fold(coords ...uint64) RNG {
	k := uint64(r.key[0]) | uint64(r.key[1])<<32
	for _, c := range coords {
		k = splitmix64(k ^ splitmix64(c+0x632be59bd9b4e019))
	}
	return RNG{key: [2]uint32{uint32(k), uint32(k >> 32)}}
}

// Named returns a key derived from r and a purpose name ("init", "dropout", ...).
func (r RNG) Named(purpose string) RNG {
	h := fnv.New64a()
	h.Write([]byte(purpose))
	return r.Fold(h.Sum64())
}

// Key returns the Philox key, for backends.
func (r RNG) Key() [2]uint32 { return r.key }

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// Philox4x32 returns the Philox-4x32-10 block for counter ctr and key.
func Philox4x32(ctr [4]uint32, key [2]uint32) [4]uint32 {
	const (
		m0, m1 = 0xD2511F53, 0xCD9E8D57
		w0, w1 = 0x9E3779B9, 0xBB67AE85
	)
	c0, c1, c2, c3 := ctr[0], ctr[1], ctr[2], ctr[3]
	k0, k1 := key[0], key[1]
	for i := 0; i < 10; i++ {
		p0 := uint64(m0) * uint64(c0)
		p1 := uint64(m1) * uint64(c2)
		c0, c1, c2, c3 = uint32(p1>>32)^c1^k0, uint32(p1), uint32(p0>>32)^c3^k1, uint32(p0)
		k0 += w0
		k1 += w1
	}
	return [4]uint32{c0, c1, c2, c3}
}

func philoxBlock(i uint64, key [2]uint32) [4]uint32 {
	return Philox4x32([4]uint32{uint32(i), uint32(i >> 32), 0, 0}, key)
}

func fraction53(w0, w1 uint32) float64 {
	return float64(uint64(w0)<<21|uint64(w1)>>11) * (1.0 / (1 << 53))
}

// uniformAt returns the uniform fraction of element i.
func uniformAt(i uint64, key [2]uint32) float64 {
	b := philoxBlock(i/2, key)
	h := 2 * (i % 2)
	return fraction53(b[h], b[h+1])
}

// normalAt returns the standard normal of element i.
func normalAt(i uint64, key [2]uint32) float64 {
	b := philoxBlock(i, key)
	u1, u2 := fraction53(b[0], b[1]), fraction53(b[2], b[3])
	return math.Sqrt(-2*math.Log(1-u1)) * math.Cos(2*math.Pi*u2)
}

// Sample returns the value the generator gives element i of a full tensor for p's
// distribution (p.Full and p.Start are not used). Backends implement Random with it or
// with code that gives the same values.
func (p RandomParams) Sample(i uint64) float64 {
	switch p.Dist {
	case DistUniform:
		return p.A + (p.B-p.A)*uniformAt(i, p.Key)
	case DistNormal:
		return p.A + p.B*normalAt(i, p.Key)
	case DistBernoulli:
		if uniformAt(i, p.Key) < p.A {
			return 1
		}
		return 0
	case DistDropout:
		if uniformAt(i, p.Key) < p.A {
			return 0
		}
		return 1 / (1 - p.A)
	}
	panic("tensor: unknown distribution")
}

func (cpuBackend) Random(dst Span, p RandomParams) {
	v := output[float64](dst)
	fullStrides := p.Full.Strides()
	base := 0
	for d, s := range p.Start {
		base += s * fullStrides[d]
	}
	forEachRow(dst.Shape, [][]int{fullStrides[len(fullStrides)-len(dst.Shape):]}, func(d int, offs []int, n int, inner []int) {
		for j := 0; j < n; j++ {
			v[d+j] = p.Sample(uint64(base + offs[0] + j*inner[0]))
		}
	})
	store(dst, v)
}

// Region is the part of a full (unsharded) tensor that a shard holds: Size elements along
// each dim starting at Start. A tensor drawn for a region has the values of those elements
// of the tensor drawn whole.
type Region struct {
	Full  Shape
	Start []int
	Size  Shape
}

// Whole returns the region covering a whole tensor of shape.
func Whole(shape ...int) Region {
	return Region{Full: Shape(shape).Clone(), Start: make([]int, len(shape)), Size: Shape(shape).Clone()}
}

func (r Region) check(op string) {
	if len(r.Start) != len(r.Full) || len(r.Size) != len(r.Full) {
		panic(fmt.Sprintf("tensor: %s: region start %v size %v in %v: ranks differ", op, r.Start, r.Size, r.Full))
	}
	for i := range r.Full {
		if r.Start[i] < 0 || r.Size[i] < 0 || r.Start[i]+r.Size[i] > r.Full[i] {
			panic(fmt.Sprintf("tensor: %s: region start %v size %v outside %v", op, r.Start, r.Size, r.Full))
		}
	}
}

// Random returns a tensor of dtype dt holding the region r of a full tensor drawn from
// dist (see Dist for the meaning of a and b) with key rng.
func Random(dev *Device, dt DType, rng RNG, dist Dist, a, b float64, r Region) *Tensor {
	r.check("Random")
	t := empty(dev, dt, r.Size)
	dev.backend.Random(t.Span(), RandomParams{Key: rng.key, Dist: dist, A: a, B: b, Full: r.Full, Start: r.Start})
	return t
}

// Uniform returns values uniform on [lo, hi) for region r.
func (rng RNG) Uniform(dev *Device, dt DType, r Region, lo, hi float64) *Tensor {
	return Random(dev, dt, rng, DistUniform, lo, hi, r)
}

// Normal returns normally distributed values with the given mean and standard deviation
// for region r (weight initialization uses it with the parameter's global shape).
func (rng RNG) Normal(dev *Device, dt DType, r Region, mean, std float64) *Tensor {
	return Random(dev, dt, rng, DistNormal, mean, std, r)
}

// Bernoulli returns 1 with probability p and 0 otherwise, for region r.
func (rng RNG) Bernoulli(dev *Device, dt DType, r Region, p float64) *Tensor {
	return Random(dev, dt, rng, DistBernoulli, p, 0, r)
}
