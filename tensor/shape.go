package tensor

import (
	"fmt"
	"strings"
)

// Shape is a tensor's size along each dim, outermost first (row-major).
type Shape []int

// Numel returns the number of elements: the product of the sizes (1 for a scalar).
func (s Shape) Numel() int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// Equal reports whether s and o have the same sizes.
func (s Shape) Equal(o Shape) bool {
	if len(s) != len(o) {
		return false
	}
	for i := range s {
		if s[i] != o[i] {
			return false
		}
	}
	return true
}

// Clone returns a copy of s that shares no memory with it.
func (s Shape) Clone() Shape { return append(Shape(nil), s...) }

// Strides returns the row-major element strides of a contiguous tensor of shape s.
func (s Shape) Strides() []int {
	st := make([]int, len(s))
	n := 1
	for i := len(s) - 1; i >= 0; i-- {
		st[i] = n
		n *= s[i]
	}
	return st
}

// String formats s as [2 3 4].
func (s Shape) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// Split3 views s as [outer, s[dim], inner]: the product of the sizes before dim, the size at
// dim and the product of the sizes after it. Kernels that work along one dim use it.
func (s Shape) Split3(dim int) (outer, n, inner int) {
	outer, inner = 1, 1
	for i := 0; i < dim; i++ {
		outer *= s[i]
	}
	for i := dim + 1; i < len(s); i++ {
		inner *= s[i]
	}
	return outer, s[dim], inner
}

// Broadcast returns the NumPy broadcast of shapes a and b: sizes are aligned from the
// right, and a size of 1 (or a missing dim) stretches to match the other. ok is false when
// two aligned sizes differ and neither is 1.
func Broadcast(a, b Shape) (out Shape, ok bool) {
	n := max(len(a), len(b))
	out = make(Shape, n)
	for i := 0; i < n; i++ {
		da, db := 1, 1
		if j := len(a) - n + i; j >= 0 {
			da = a[j]
		}
		if j := len(b) - n + i; j >= 0 {
			db = b[j]
		}
		switch {
		case da == db, db == 1:
			out[i] = da
		case da == 1:
			out[i] = db
		default:
			return nil, false
		}
	}
	return out, true
}

// BroadcastStrides returns, for a contiguous tensor of shape s broadcast to shape to, the
// element stride of each of to's dims: 0 where s is stretched. Backends use it to read a
// broadcast operand without copying. It panics if s does not broadcast to to.
func BroadcastStrides(s, to Shape) []int {
	if len(s) > len(to) {
		panic(fmt.Sprintf("tensor: cannot broadcast %v to %v", s, to))
	}
	st := make([]int, len(to))
	n := 1
	for i := len(to) - 1; i >= 0; i-- {
		j := len(s) - len(to) + i
		if j < 0 {
			continue
		}
		switch s[j] {
		case to[i]:
			st[i] = n
		case 1:
		default:
			panic(fmt.Sprintf("tensor: cannot broadcast %v to %v", s, to))
		}
		n *= s[j]
	}
	return st
}

// normDim turns a possibly negative dim (counted from the end, as in PyTorch) into an index,
// panicking with op's name when it is out of range.
func normDim(op string, dim, rank int) int {
	d := dim
	if d < 0 {
		d += rank
	}
	if d < 0 || d >= rank {
		panic(fmt.Sprintf("tensor: %s: dim %d out of range for rank %d", op, dim, rank))
	}
	return d
}
