package tensor

import "math"

// BFloat16 is the bit pattern of a bfloat16 value: the top 16 bits of a float32.
type BFloat16 uint16

// Float16 is the bit pattern of an IEEE 754 binary16 value.
type Float16 uint16

// BF16FromFloat32 rounds f to the nearest bfloat16, ties to even. NaNs stay NaN (quiet).
func BF16FromFloat32(f float32) BFloat16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep the sign, force a quiet payload
		return BFloat16(b>>16 | 0x40)
	}
	// Add half an ulp of the result, minus one unless the kept lsb is odd (ties to even).
	b += 0x7fff + (b>>16)&1
	return BFloat16(b >> 16)
}

// Float32 returns the exact float32 value of h.
func (h BFloat16) Float32() float32 { return math.Float32frombits(uint32(h) << 16) }

// BF16FromFloat64 rounds f to the nearest bfloat16, ties to even, with a single rounding.
func BF16FromFloat64(f float64) BFloat16 { return BF16FromFloat32(roundToOdd32(f)) }

// F16FromFloat64 rounds f to the nearest binary16, ties to even, with a single rounding.
func F16FromFloat64(f float64) Float16 { return F16FromFloat32(roundToOdd32(f)) }

// roundToOdd32 narrows f to float32 rounding to odd: truncate, then set the lowest bit if
// anything was lost. A later round-to-nearest-even to a format with at least two fewer
// significand bits then gives the correctly rounded result (no double-rounding error).
func roundToOdd32(f float64) float32 {
	r := float32(f)
	if math.IsNaN(f) || math.IsInf(float64(r), 0) || float64(r) == f {
		if math.IsInf(float64(r), 0) && !math.IsInf(f, 0) {
			// Overflowed by rounding: the largest finite float32 with its odd lsb set
			// still rounds to infinity in bf16/f16, as f itself would.
			return float32(math.Copysign(math.MaxFloat32, f))
		}
		return r
	}
	if math.Abs(float64(r)) > math.Abs(f) { // rounded away from zero: step back
		r = math.Float32frombits(math.Float32bits(r) - 1)
	}
	return math.Float32frombits(math.Float32bits(r) | 1)
}

// F16FromFloat32 rounds f to the nearest binary16, ties to even: values beyond the largest
// finite half (65504) round to infinity, small ones to subnormals or signed zero.
func F16FromFloat32(f float32) Float16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	man := b & 0x7fffff
	switch {
	case exp == 0xff: // Inf or NaN
		if man != 0 {
			return Float16(sign | 0x7e00)
		}
		return Float16(sign | 0x7c00)
	case exp > 127+15: // too large: infinity
		return Float16(sign | 0x7c00)
	case exp >= 127-14: // normal half range
		e := uint32(exp - 127 + 15)
		// 23-bit mantissa to 10 bits: round on the 13 dropped bits.
		v := e<<10 | man>>13
		rest := man & 0x1fff
		if rest > 0x1000 || (rest == 0x1000 && v&1 == 1) {
			v++ // may carry into the exponent, up to infinity: that is correct
		}
		return Float16(sign | uint16(v))
	case exp >= 127-25: // subnormal half (or rounds up to the smallest normal)
		m := man | 0x800000 // implicit bit
		shift := uint32(126 - exp)
		// value = m * 2^(exp-150); the subnormal unit is 2^-24, so v = m >> (126-exp).
		v := m >> shift
		rest := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rest > half || (rest == half && v&1 == 1) {
			v++
		}
		return Float16(sign | uint16(v))
	}
	return Float16(sign) // underflows to signed zero
}

// Float32 returns the exact float32 value of h.
func (h Float16) Float32() float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: man * 2^-24, exact in float32.
	v := float32(man) * (1.0 / (1 << 24))
	if sign != 0 {
		v = -v
	}
	return v
}
