package tensor_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// TestPhilox4x32KnownAnswers checks the known-answer vectors of Random123's
// kat_vectors for philox4x32_10.
func TestPhilox4x32KnownAnswers(t *testing.T) {
	cases := []struct {
		name string
		ctr  [4]uint32
		key  [2]uint32
		want [4]uint32
	}{
		{"zeros", [4]uint32{0, 0, 0, 0}, [2]uint32{0, 0}, [4]uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
		{"ones", [4]uint32{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, [2]uint32{0xffffffff, 0xffffffff},
			[4]uint32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
		{"pi", [4]uint32{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, [2]uint32{0xa4093822, 0x299f31d0},
			[4]uint32{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, tensor.Philox4x32(c.ctr, c.key))
		})
	}
}

// TestRandomElementBits checks the documented per-element recipe, built here from the
// (known-answer-checked) Philox block: uniform element i takes words 2(i mod 2), 2(i mod 2)+1
// of block i/2 as a 53-bit fraction; normal element i uses block i with Box–Muller.
func TestRandomElementBits(t *testing.T) {
	dev := tensor.NewCPU()
	rng := tensor.NewRNG(5).Fold(1, 2)
	key := rng.Key()
	frac := func(w0, w1 uint32) float64 { return float64(uint64(w0)<<21|uint64(w1)>>11) / (1 << 53) }
	const n = 37 // odd, so the last block is half used
	u := tensor.ToSlice[float64](rng.Uniform(dev, tensor.F64, tensor.Whole(n), -1, 3))
	z := tensor.ToSlice[float64](rng.Normal(dev, tensor.F64, tensor.Whole(n), 0.5, 2))
	for i := 0; i < n; i++ {
		b := tensor.Philox4x32([4]uint32{uint32(i / 2), 0, 0, 0}, key)
		h := 2 * (i % 2)
		require.Equal(t, -1+4*frac(b[h], b[h+1]), u[i], "uniform element %d", i)
		b = tensor.Philox4x32([4]uint32{uint32(i), 0, 0, 0}, key)
		u1, u2 := frac(b[0], b[1]), frac(b[2], b[3])
		require.InDelta(t, 0.5+2*math.Sqrt(-2*math.Log(1-u1))*math.Cos(2*math.Pi*u2), z[i], 1e-14, "normal element %d", i)
	}
}

// drawBits returns the region r of a tensor drawn from dist with rng, as float64 bits.
func drawBits(dev *tensor.Device, dt tensor.DType, rng tensor.RNG, dist tensor.Dist, a, b float64, r tensor.Region) []uint64 {
	v := tensor.ToSlice[float64](tensor.Random(dev, dt, rng, dist, a, b, r))
	bits := make([]uint64, len(v))
	for i, x := range v {
		bits[i] = math.Float64bits(x)
	}
	return bits
}

// sliceBox returns the elements of a row-major whole of shape full inside the box
// [start, start+size).
func sliceBox(whole []uint64, full, start, size []int) []uint64 {
	var out []uint64
	for i := 0; i < tensor.Shape(size).Numel(); i++ {
		idx := unravel(i, size)
		lin := 0
		for d := range full {
			lin = lin*full[d] + start[d] + idx[d]
		}
		out = append(out, whole[lin])
	}
	return out
}

// TestRandomRegionEqualsSliceOfWhole is the property the generator exists for: a shard
// draws exactly (bitwise) the values of the same elements of the whole tensor.
func TestRandomRegionEqualsSliceOfWhole(t *testing.T) {
	dev := tensor.NewCPU()
	rng := tensor.NewRNG(42).Named("region")
	dists := []struct {
		name string
		dist tensor.Dist
		a, b float64
	}{
		{"Uniform", tensor.DistUniform, -2, 5},
		{"Normal", tensor.DistNormal, 1, 0.02},
		{"Bernoulli", tensor.DistBernoulli, 0.3, 0},
		{"Dropout", tensor.DistDropout, 0.1, 0},
	}
	regions := []struct {
		name              string
		full, start, size []int
	}{
		{"rows_8_16_of_16x32", []int{16, 32}, []int{8, 0}, []int{8, 32}},
		{"column_block", []int{16, 32}, []int{0, 8}, []int{16, 8}},
		{"odd_column_block", []int{16, 32}, []int{3, 5}, []int{7, 9}},
		{"3d_interior", []int{6, 7, 8}, []int{1, 2, 3}, []int{3, 4, 2}},
		{"whole", []int{5, 3}, []int{0, 0}, []int{5, 3}},
		{"single_element", []int{4, 4, 4}, []int{3, 1, 2}, []int{1, 1, 1}},
	}
	for _, d := range dists {
		for _, r := range regions {
			for _, dt := range []tensor.DType{tensor.F64, tensor.F32} {
				t.Run(d.name+"/"+r.name+"/"+dt.String(), func(t *testing.T) {
					whole := drawBits(dev, dt, rng, d.dist, d.a, d.b, tensor.Whole(r.full...))
					part := drawBits(dev, dt, rng, d.dist, d.a, d.b, tensor.Region{Full: r.full, Start: r.start, Size: r.size})
					require.Equal(t, sliceBox(whole, r.full, r.start, r.size), part)
				})
			}
		}
	}
	t.Run("DropoutRegion", func(t *testing.T) {
		full := []int{16, 32}
		x := tensor.Ones(dev, tensor.F32, full...)
		whole := tensor.ToSlice[float32](tensor.Dropout(x, 0.2, rng))
		for _, r := range regions[:3] {
			part := tensor.DropoutRegion(tensor.Ones(dev, tensor.F32, r.size...), 0.2, rng, r.full, r.start)
			got := tensor.ToSlice[float32](part)
			for i := range got {
				idx := unravel(i, r.size)
				require.Equal(t, whole[(r.start[0]+idx[0])*32+r.start[1]+idx[1]], got[i], "%s element %v", r.name, idx)
			}
		}
	})
}

func TestRandomStatistics(t *testing.T) {
	dev := tensor.NewCPU()
	const n = 100000
	rng := tensor.NewRNG(2024)
	meanStd := func(v []float64) (float64, float64) {
		var s, s2 float64
		for _, x := range v {
			s += x
		}
		m := s / float64(len(v))
		for _, x := range v {
			s2 += (x - m) * (x - m)
		}
		return m, math.Sqrt(s2 / float64(len(v)-1))
	}
	// Tolerances are 5 standard errors: σ/√n for a mean, σ/√(2n) for a normal's std.
	se := 1 / math.Sqrt(n)
	t.Run("Normal", func(t *testing.T) {
		m, s := meanStd(tensor.ToSlice[float64](rng.Normal(dev, tensor.F64, tensor.Whole(n), 3, 2)))
		assert.InDelta(t, 3, m, 5*2*se)
		assert.InDelta(t, 2, s, 5*2*se/math.Sqrt2)
	})
	t.Run("Uniform", func(t *testing.T) {
		v := tensor.ToSlice[float64](rng.Uniform(dev, tensor.F64, tensor.Whole(n), -1, 3))
		m, s := meanStd(v)
		assert.InDelta(t, 1, m, 5*(4/math.Sqrt(12))*se)
		assert.InDelta(t, 4/math.Sqrt(12), s, 0.01)
		for _, x := range v {
			require.True(t, x >= -1 && x < 3, "%v outside [-1, 3)", x)
		}
	})
	t.Run("Bernoulli", func(t *testing.T) {
		const p = 0.3
		m, _ := meanStd(tensor.ToSlice[float64](rng.Bernoulli(dev, tensor.F64, tensor.Whole(n), p)))
		assert.InDelta(t, p, m, 5*math.Sqrt(p*(1-p))*se)
	})
	t.Run("Dropout", func(t *testing.T) {
		const p = 0.1
		v := tensor.ToSlice[float64](tensor.Random(dev, tensor.F64, rng, tensor.DistDropout, p, 0, tensor.Whole(n)))
		zeros := 0
		for _, x := range v {
			if x == 0 {
				zeros++
			} else {
				require.Equal(t, 1/(1-p), x)
			}
		}
		assert.InDelta(t, p, float64(zeros)/n, 5*math.Sqrt(p*(1-p))*se)
	})
}

func TestRNGKeys(t *testing.T) {
	dev := tensor.NewCPU()
	draw := func(r tensor.RNG) []float64 {
		return tensor.ToSlice[float64](r.Uniform(dev, tensor.F64, tensor.Whole(64), 0, 1))
	}
	base := tensor.NewRNG(1)
	assert.Equal(t, draw(base), draw(tensor.NewRNG(1)), "same seed, same values")
	assert.Equal(t, draw(base.Fold(3, 4)), draw(tensor.NewRNG(1).Fold(3, 4)))
	assert.Equal(t, draw(base.Named("init")), draw(tensor.NewRNG(1).Named("init")))
	assert.Equal(t, base.Fold(3, 4), base.Fold(3).Fold(4), "folding coordinates one at a time is folding them together")
	streams := map[string]tensor.RNG{
		"seed1":         base,
		"seed2":         tensor.NewRNG(2),
		"fold3":         base.Fold(3),
		"fold4":         base.Fold(4),
		"fold3,4":       base.Fold(3, 4),
		"fold4,3":       base.Fold(4, 3),
		"named_init":    base.Named("init"),
		"named_dropout": base.Named("dropout"),
		"seed2_named":   tensor.NewRNG(2).Named("init"),
	}
	seen := map[[2]uint32]string{}
	firsts := map[float64]string{}
	for name, r := range streams {
		if other, dup := seen[r.Key()]; dup {
			t.Errorf("%s and %s have the same key %v", name, other, r.Key())
		}
		seen[r.Key()] = name
		v := draw(r)
		if other, dup := firsts[v[0]]; dup {
			t.Errorf("%s and %s start with the same value", name, other)
		}
		firsts[v[0]] = name
	}
}
