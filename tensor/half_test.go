package tensor_test

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// bfloat16 and binary16 conversions against references built from the formats'
// definitions: a decoder written from the bit layout, and rounding that searches the sorted
// table of all finite values for the nearest one.

// halfFormat describes a 16-bit floating-point format: 1 sign bit, expBits exponent bits
// with bias, and the rest fraction bits.
type halfFormat struct {
	name    string
	expBits int
	bias    int
	maxBits uint16 // largest finite positive value
	infBits uint16
}

var (
	f16Format  = halfFormat{name: "float16", expBits: 5, bias: 15, maxBits: 0x7bff, infBits: 0x7c00}
	bf16Format = halfFormat{name: "bfloat16", expBits: 8, bias: 127, maxBits: 0x7f7f, infBits: 0x7f80}
)

// value decodes bits: (−1)^s·2^(e−bias)·(1 + m/2^fb) for normal e, (−1)^s·2^(1−bias)·m/2^fb
// for e = 0, ±∞ or NaN for the all-ones exponent.
func (f halfFormat) value(bits uint16) float64 {
	fb := 15 - f.expBits
	e := int(bits>>fb) & (1<<f.expBits - 1)
	m := float64(bits & (1<<fb - 1))
	s := 1.0
	if bits&0x8000 != 0 {
		s = -1
	}
	switch e {
	case 1<<f.expBits - 1:
		if m != 0 {
			return math.NaN()
		}
		return math.Inf(int(s))
	case 0:
		return s * math.Ldexp(m, 1-f.bias-fb)
	}
	return s * math.Ldexp(1+m/float64(int(1)<<fb), e-f.bias)
}

// round returns the bits of the value nearest to x by searching the table of the finite
// non-negative values (bits 0 … maxBits, increasing), ties to the even bit pattern. Values
// at or beyond max + half an ulp round to infinity (IEEE 754: the unbounded-exponent
// rounding would exceed max; the exact tie goes to infinity because max's last bit is odd).
func (f halfFormat) round(x float64) (bits uint16, isNaN bool) {
	if math.IsNaN(x) {
		return 0, true
	}
	var sign uint16
	if math.Signbit(x) {
		sign = 0x8000
	}
	a := math.Abs(x)
	maxV := f.value(f.maxBits)
	halfUlp := (maxV - f.value(f.maxBits-1)) / 2
	if a >= maxV+halfUlp {
		return sign | f.infBits, false
	}
	n := int(f.maxBits) + 1
	b := sort.Search(n, func(i int) bool { return f.value(uint16(i)) >= a })
	switch {
	case b == n: // between max and max + half an ulp
		return sign | f.maxBits, false
	case f.value(uint16(b)) == a || b == 0:
		return sign | uint16(b), false
	}
	lo, hi := uint16(b-1), uint16(b)
	mid := (f.value(lo) + f.value(hi)) / 2 // exact: one bit more than the format
	switch {
	case a < mid:
		return sign | lo, false
	case a > mid:
		return sign | hi, false
	case lo%2 == 0:
		return sign | lo, false
	}
	return sign | hi, false
}

type halfConv struct {
	f     halfFormat
	from  func(uint16) float64 // code under test: bits → value
	fro32 func(float32) uint16
	fro64 func(float64) uint16
}

var halfConvs = []halfConv{
	{f16Format,
		func(b uint16) float64 { return float64(tensor.Float16(b).Float32()) },
		func(x float32) uint16 { return uint16(tensor.F16FromFloat32(x)) },
		func(x float64) uint16 { return uint16(tensor.F16FromFloat64(x)) }},
	{bf16Format,
		func(b uint16) float64 { return float64(tensor.BFloat16(b).Float32()) },
		func(x float32) uint16 { return uint16(tensor.BF16FromFloat32(x)) },
		func(x float64) uint16 { return uint16(tensor.BF16FromFloat64(x)) }},
}

// TestHalfExhaustive decodes all 65536 bit patterns and converts each value back, from
// float32 and from float64: the bits round-trip, and NaNs stay NaN.
func TestHalfExhaustive(t *testing.T) {
	for _, c := range halfConvs {
		t.Run(c.f.name, func(t *testing.T) {
			for i := 0; i < 1<<16; i++ {
				b := uint16(i)
				want := c.f.value(b)
				v := c.from(b)
				if math.IsNaN(want) {
					require.True(t, math.IsNaN(v), "%#04x decodes to %v, want NaN", b, v)
					require.True(t, math.IsNaN(c.f.value(c.fro32(float32(v)))), "NaN %#04x from float32", b)
					require.True(t, math.IsNaN(c.f.value(c.fro64(v))), "NaN %#04x from float64", b)
					require.Equal(t, b&0x8000, c.fro32(float32(v))&0x8000, "NaN %#04x keeps its sign", b)
					continue
				}
				require.Equal(t, math.Float64bits(want), math.Float64bits(v), "%#04x decodes to %v, want %v", b, v, want)
				require.Equal(t, b, c.fro32(float32(v)), "%#04x from float32", b)
				require.Equal(t, b, c.fro64(v), "%#04x from float64", b)
			}
		})
	}
}

// halfInputs returns inputs near the format's values: random points between neighbours,
// exact midpoints (ties) and their float neighbours on either side, values around the
// overflow threshold and the subnormal range, and, when next is given, its ulp-level
// neighbours of the ties (to catch double rounding).
func halfInputs(r *rand.Rand, f halfFormat, n int, next func(x, dir float64) float64) []float64 {
	maxV := f.value(f.maxBits)
	over := maxV + (maxV-f.value(f.maxBits-1))/2
	xs := []float64{0, math.Copysign(0, -1), over, -over, next(over, 0), next(over, math.Inf(1)),
		math.Inf(1), math.Inf(-1), math.NaN(), maxV, 2 * maxV, f.value(1) / 2, f.value(1) / 4, next(f.value(1)/2, 1)}
	for len(xs) < n {
		b := uint16(r.IntN(int(f.maxBits))) // b and b+1 are both finite
		lo, hi := f.value(b), f.value(b+1)
		mid := (lo + hi) / 2
		var x float64
		switch r.IntN(5) {
		case 0:
			x = mid
		case 1:
			x = next(mid, math.Inf(1))
		case 2:
			x = next(mid, 0)
		default:
			x = lo + (hi-lo)*r.Float64()
		}
		if r.IntN(2) == 0 {
			x = -x
		}
		xs = append(xs, x)
	}
	return xs
}

func next32(x, dir float64) float64 { return float64(math.Nextafter32(float32(x), float32(dir))) }

func TestHalfFromFloat32(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 21))
	for _, c := range halfConvs {
		t.Run(c.f.name, func(t *testing.T) {
			xs := halfInputs(r, c.f, 150000, next32)
			for range 150000 { // every float32: subnormal, normal, overflow, NaN
				xs = append(xs, float64(math.Float32frombits(r.Uint32())))
			}
			for _, x := range xs {
				x32 := float32(x) // the inputs above are float32 values
				want, nan := c.f.round(float64(x32))
				got := c.fro32(x32)
				if nan {
					require.True(t, math.IsNaN(c.f.value(got)), "%v gives %#04x, want NaN", x32, got)
					continue
				}
				require.Equal(t, want, got, "%v (%#08x): got %#04x (%v) want %#04x (%v)",
					x32, math.Float32bits(x32), got, c.f.value(got), want, c.f.value(want))
			}
		})
	}
}

func TestHalfFromFloat64(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 22))
	for _, c := range halfConvs {
		t.Run(c.f.name, func(t *testing.T) {
			xs := halfInputs(r, c.f, 150000, math.Nextafter)
			// Ties of the 16-bit format one float64 ulp away are float32 ties after a plain
			// float64→float32 rounding: the double-rounding trap.
			for range 50000 {
				xs = append(xs, float64(math.Float32frombits(r.Uint32())))
			}
			for range 50000 { // random float64 bits with exponents around the formats' range
				e := r.IntN(300) - 150
				x := math.Ldexp(1+r.Float64(), e)
				if r.IntN(2) == 0 {
					x = -x
				}
				xs = append(xs, x)
			}
			for range 20000 { // any float64
				xs = append(xs, math.Float64frombits(r.Uint64()))
			}
			for _, x := range xs {
				want, nan := c.f.round(x)
				got := c.fro64(x)
				if nan {
					require.True(t, math.IsNaN(c.f.value(got)), "%v gives %#04x, want NaN", x, got)
					continue
				}
				require.Equal(t, want, got, "%v (%#016x): got %#04x (%v) want %#04x (%v)",
					x, math.Float64bits(x), got, c.f.value(got), want, c.f.value(want))
			}
		})
	}
}

// TestHalfOverflowBoundary spells out the IEEE rule at the top of each format.
func TestHalfOverflowBoundary(t *testing.T) {
	assert.Equal(t, tensor.Float16(0x7bff), tensor.F16FromFloat64(65519.99))
	assert.Equal(t, tensor.Float16(0x7c00), tensor.F16FromFloat64(65520))  // max + half ulp: a tie, to even (∞)
	assert.Equal(t, tensor.Float16(0xfc00), tensor.F16FromFloat32(-65520)) // and negative
	assert.Equal(t, tensor.Float16(0x7bff), tensor.F16FromFloat32(65519))
	assert.Equal(t, tensor.Float16(0x0001), tensor.F16FromFloat64(0x1p-24))
	assert.Equal(t, tensor.Float16(0x0000), tensor.F16FromFloat64(0x1p-25))                          // tie to even (0)
	assert.Equal(t, tensor.Float16(0x0001), tensor.F16FromFloat64(math.Nextafter(0x1p-25, 1)))       // just above the tie
	assert.Equal(t, tensor.Float16(0x0400), tensor.F16FromFloat32(math.Float32frombits(0x387fe000))) // largest subnormal + half ulp rounds to the smallest normal
	bfMax := float64(math.Float32frombits(0x7f7f0000))
	assert.Equal(t, tensor.BFloat16(0x7f80), tensor.BF16FromFloat64(bfMax+0x1p119))
	assert.Equal(t, tensor.BFloat16(0x7f7f), tensor.BF16FromFloat64(math.Nextafter(bfMax+0x1p119, 0)))
	assert.Equal(t, tensor.BFloat16(0x7f80), tensor.BF16FromFloat32(math.MaxFloat32))
	assert.Equal(t, tensor.BFloat16(0x7f80), tensor.BF16FromFloat64(math.MaxFloat64))
	assert.Equal(t, tensor.BFloat16(0x3f80), tensor.BF16FromFloat64(1+0x1p-8))                   // tie to even (1)
	assert.Equal(t, tensor.BFloat16(0x3f81), tensor.BF16FromFloat64(1+0x1p-8+0x1p-40))           // above the tie: a plain float32 rounding would lose it
	assert.Equal(t, tensor.Float16(0x3c00), tensor.F16FromFloat64(1+0x1p-11))                    // tie to even
	assert.Equal(t, tensor.Float16(0x3c01), tensor.F16FromFloat64(math.Nextafter(1+0x1p-11, 2))) // double-rounding trap
}

// TestCastAllPairs checks Cast between every pair of dtypes, element by element, against the
// references: floats to floats round to nearest even, floats to integers truncate toward
// zero, integers to floats round to nearest even.
func TestCastAllPairs(t *testing.T) {
	dev := tensor.NewCPU()
	vals := []float64{0, math.Copysign(0, -1), 1, -1, 1.5, -2.5, 2.5, 3.75, -7.125, 0.1, 1.0 / 3, 255.5, 257, -1031,
		65519, 65520, 70000, -70000, 1e-8, -3e-5, 6e-8, 1e6 + 0.5, 16777217, 1 + 0x1p-8 + 0x1p-30, 1e30, -1e-30}
	all := []tensor.DType{tensor.F64, tensor.F32, tensor.BF16, tensor.F16, tensor.I32, tensor.I64}
	for _, src := range all {
		for _, dst := range all {
			t.Run(src.String()+"_to_"+dst.String(), func(t *testing.T) {
				s := tensor.FromSlice(dev, vals).Cast(src)
				sv := exactValues(s) // the source's values, decoded by the references
				got := exactValues(s.Cast(dst))
				require.Len(t, got, len(sv))
				for i, v := range sv {
					want, ok := convertRef(v, dst)
					if !ok {
						continue // an infinity or out-of-range value into an integer type
					}
					require.Equal(t, math.Float64bits(want), math.Float64bits(got[i]), "%v (%v) to %v: got %v want %v", v, src, dst, got[i], want)
				}
			})
		}
	}
}

// exactValues reads t's elements through their raw representation, decoding half formats
// with the reference decoders.
func exactValues(t *tensor.Tensor) []float64 {
	var out []float64
	switch t.DType() {
	case tensor.F64:
		return tensor.ToSlice[float64](t)
	case tensor.F32:
		for _, v := range tensor.ToSlice[float32](t) {
			out = append(out, float64(v))
		}
	case tensor.BF16:
		for _, v := range tensor.ToSlice[tensor.BFloat16](t) {
			out = append(out, bf16Format.value(uint16(v)))
		}
	case tensor.F16:
		for _, v := range tensor.ToSlice[tensor.Float16](t) {
			out = append(out, f16Format.value(uint16(v)))
		}
	case tensor.I32:
		for _, v := range tensor.ToSlice[int32](t) {
			out = append(out, float64(v))
		}
	case tensor.I64:
		for _, v := range tensor.ToSlice[int64](t) {
			out = append(out, float64(v))
		}
	}
	return out
}

// convertRef converts the exact value v to dt (ok is false where the result is undefined).
func convertRef(v float64, dt tensor.DType) (float64, bool) {
	switch dt {
	case tensor.F64:
		return v, true
	case tensor.F32:
		return float64(float32(v)), true // Go's conversion rounds to nearest even
	case tensor.BF16:
		b, _ := bf16Format.round(v)
		return bf16Format.value(b), true
	case tensor.F16:
		b, _ := f16Format.round(v)
		return f16Format.value(b), true
	}
	if math.IsInf(v, 0) || math.Abs(v) >= 1<<31 {
		return 0, false
	}
	return math.Trunc(v) + 0, true // +0: integers have no negative zero
}

// TestHalfArithmetic checks that BF16 and F16 ops compute in float32 and round once.
func TestHalfArithmetic(t *testing.T) {
	dev := tensor.NewCPU()
	r := rand.New(rand.NewPCG(23, 23))
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
		f := bf16Format
		if dt == tensor.F16 {
			f = f16Format
		}
		t.Run(dt.String(), func(t *testing.T) {
			a := tensor.FromSlice(dev, randVals(r, 500, -4, 4)).Cast(dt)
			b := tensor.FromSlice(dev, randVals(r, 500, 0.25, 4)).Cast(dt)
			av, bv := exactValues(a), exactValues(b)
			ops := []struct {
				name string
				got  *tensor.Tensor
				ref  func(x, y float32) float32
			}{
				{"Add", tensor.Add(a, b), func(x, y float32) float32 { return x + y }},
				{"Mul", tensor.Mul(a, b), func(x, y float32) float32 { return x * y }},
				{"Div", tensor.Div(a, b), func(x, y float32) float32 { return x / y }},
				{"Exp", tensor.Exp(a), func(x, _ float32) float32 { return float32(math.Exp(float64(x))) }},
			}
			for _, o := range ops {
				require.Equal(t, dt, o.got.DType())
				got := exactValues(o.got)
				for i := range got {
					wb, _ := f.round(float64(o.ref(float32(av[i]), float32(bv[i]))))
					require.Equal(t, f.value(wb), got[i], "%s(%v, %v)", o.name, av[i], bv[i])
				}
			}
		})
	}
}
