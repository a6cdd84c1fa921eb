package transport

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"megago/tensor"
)

// The reference: every element decoded to float64, combined there, rounded to the dtype.

var hostbufDTypes = []tensor.DType{tensor.F64, tensor.F32, tensor.BF16, tensor.F16, tensor.I32, tensor.I64}

func isFloat(dt tensor.DType) bool { return dt != tensor.I32 && dt != tensor.I64 }

// hostbufValues returns n small values (exact in every dtype), with a NaN at index nanAt
// for float dtypes.
func hostbufValues(dt tensor.DType, n, mul, nanAt int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = float64((i*mul)%11 - 5)
		if isFloat(dt) {
			v[i] *= 0.75
		}
	}
	if isFloat(dt) {
		v[nanAt] = math.NaN()
	}
	return v
}

// roundTo rounds v to dt as a cast would (truncating for integers).
func roundTo(dt tensor.DType, v float64) float64 {
	switch dt {
	case tensor.F32:
		return float64(float32(v))
	case tensor.BF16:
		return float64(tensor.BF16FromFloat64(v).Float32())
	case tensor.F16:
		return float64(tensor.F16FromFloat64(v).Float32())
	case tensor.I32, tensor.I64:
		return math.Trunc(v)
	}
	return v
}

func encode(dt tensor.DType, vals []float64) []byte {
	b := make([]byte, len(vals)*dt.Size())
	le := binary.LittleEndian
	for i, v := range vals {
		switch dt {
		case tensor.F64:
			le.PutUint64(b[8*i:], math.Float64bits(v))
		case tensor.F32:
			le.PutUint32(b[4*i:], math.Float32bits(float32(v)))
		case tensor.BF16:
			le.PutUint16(b[2*i:], uint16(tensor.BF16FromFloat64(v)))
		case tensor.F16:
			le.PutUint16(b[2*i:], uint16(tensor.F16FromFloat64(v)))
		case tensor.I32:
			le.PutUint32(b[4*i:], uint32(int32(v)))
		case tensor.I64:
			le.PutUint64(b[8*i:], uint64(int64(v)))
		}
	}
	return b
}

func decode(dt tensor.DType, b []byte) []float64 {
	v := make([]float64, len(b)/dt.Size())
	le := binary.LittleEndian
	for i := range v {
		switch dt {
		case tensor.F64:
			v[i] = math.Float64frombits(le.Uint64(b[8*i:]))
		case tensor.F32:
			v[i] = float64(math.Float32frombits(le.Uint32(b[4*i:])))
		case tensor.BF16:
			v[i] = float64(tensor.BFloat16(le.Uint16(b[2*i:])).Float32())
		case tensor.F16:
			v[i] = float64(tensor.Float16(le.Uint16(b[2*i:])).Float32())
		case tensor.I32:
			v[i] = float64(int32(le.Uint32(b[4*i:])))
		case tensor.I64:
			v[i] = float64(int64(le.Uint64(b[8*i:])))
		}
	}
	return v
}

// reference is what Reduce then Finish over the two contributions a and x give.
func reference(dt tensor.DType, op Op, a, x float64) float64 {
	switch {
	case op == Max && (x > a || math.IsNaN(x)), op == Min && (x < a || math.IsNaN(x)):
		return x
	case op == Max, op == Min:
		return a
	case op == Avg:
		return roundTo(dt, roundTo(dt, a+x)/2)
	}
	return roundTo(dt, a+x)
}

// TestReduce checks Reduce and Finish for every dtype and op, on aligned buffers (the
// fast path of float sums), misaligned ones, and with dst the same bytes as a.
func TestReduce(t *testing.T) {
	const n = 9
	for _, dt := range hostbufDTypes {
		for _, op := range []Op{Sum, Max, Min, Avg} {
			for _, layout := range []string{"aligned", "misaligned", "in place"} {
				t.Run(fmt.Sprintf("%v/%d/%s", dt, op, layout), func(t *testing.T) {
					av, xv := hostbufValues(dt, n, 3, 2), hostbufValues(dt, n, 7, 5)
					a, x := encode(dt, av), encode(dt, xv)
					dst := make([]byte, len(a))
					switch layout {
					case "misaligned":
						a = append(make([]byte, 1, len(a)+1), a...)[1:]
						dst = make([]byte, len(a)+1)[1:]
					case "in place":
						dst = a
					}
					Reduce(dt, op, dst, a, x)
					Finish(dt, op, dst, 2)
					got := decode(dt, dst)
					for i := range got {
						want := reference(dt, op, av[i], xv[i])
						if got[i] != want && !(math.IsNaN(got[i]) && math.IsNaN(want)) {
							t.Errorf("element %d: %v ⊕ %v = %v, want %v", i, av[i], xv[i], got[i], want)
						}
					}
				})
			}
		}
	}
}

func TestReducePanics(t *testing.T) {
	tests := []struct {
		name string
		dt   tensor.DType
		dst  int
	}{{"lengths differ", tensor.F32, 4}, {"not numeric", tensor.DType(0), 8}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			Reduce(tc.dt, Sum, make([]byte, tc.dst), make([]byte, 8), make([]byte, 8))
		})
	}
}
