package tensor

import (
	"fmt"
	"slices"
)

// Views and rearrangements. Reshape is always free (tensors are contiguous); Narrow is free
// when every dim before the narrowed one has size 1; the rest copy.

// view returns a tensor sharing t's storage with a new offset and shape.
func (t *Tensor) view(off int, shape Shape) *Tensor {
	t.checkLive("view")
	return &Tensor{st: t.st, off: t.off + off, dtype: t.dtype, shape: shape}
}

// Reshape returns a view of t with a new shape of the same element count; one size may be
// −1 to be inferred. It panics if the sizes do not match.
func (t *Tensor) Reshape(shape ...int) *Tensor {
	s := Shape(shape).Clone()
	infer := -1
	known := 1
	for i, d := range s {
		if d == -1 && infer < 0 {
			infer = i
			continue
		}
		known *= d
	}
	if infer >= 0 && known > 0 && t.Numel()%known == 0 {
		s[infer] = t.Numel() / known
	}
	if s.Numel() != t.Numel() || (infer >= 0 && s[infer] < 0) {
		panic(fmt.Sprintf("tensor: Reshape: %v to %v: element counts differ", t.shape, Shape(shape)))
	}
	out := t.view(0, s)
	in := t.shape
	return record1("Reshape", out, []*Tensor{t}, func(gy *Tensor) []*Tensor {
		return []*Tensor{gy.Reshape(in...)}
	})
}

// Unsqueeze returns a view with a new dim of size 1 at position dim.
func (t *Tensor) Unsqueeze(dim int) *Tensor {
	d := normDim("Unsqueeze", dim, len(t.shape)+1)
	return t.Reshape(slices.Insert(t.shape.Clone(), d, 1)...)
}

// Squeeze returns a view without dim, which must have size 1.
func (t *Tensor) Squeeze(dim int) *Tensor {
	d := normDim("Squeeze", dim, len(t.shape))
	if t.shape[d] != 1 {
		panic(fmt.Sprintf("tensor: Squeeze: dim %d of %v has size %d, not 1", dim, t.shape, t.shape[d]))
	}
	return t.Reshape(slices.Delete(t.shape.Clone(), d, d+1)...)
}

// Contiguous returns t: every tensor is contiguous in row-major order. It exists so code
// ported from PyTorch reads the same.
func (t *Tensor) Contiguous() *Tensor { return t }

// Permute returns a copy of t whose dim i is t's dim perm[i]. It panics if perm is not a
// permutation of t's dims.
func (t *Tensor) Permute(perm ...int) *Tensor {
	if len(perm) != len(t.shape) {
		panic(fmt.Sprintf("tensor: Permute: %v of %v: need %d dims", perm, t.shape, len(t.shape)))
	}
	p := make([]int, len(perm))
	seen := make([]bool, len(perm))
	shape := make(Shape, len(perm))
	for i, d := range perm {
		d = normDim("Permute", d, len(t.shape))
		if seen[d] {
			panic(fmt.Sprintf("tensor: Permute: %v of %v repeats dim %d", perm, t.shape, d))
		}
		seen[d] = true
		p[i] = d
		shape[i] = t.shape[d]
	}
	out := empty(t.Device(), t.dtype, shape)
	t.Device().backend.Permute(out.Span(), t.Span(), p)
	inv := make([]int, len(p))
	for i, d := range p {
		inv[d] = i
	}
	return record1("Permute", out, []*Tensor{t}, func(gy *Tensor) []*Tensor {
		return []*Tensor{gy.Permute(inv...)}
	})
}

// Transpose returns a copy of t with dims d0 and d1 swapped.
func (t *Tensor) Transpose(d0, d1 int) *Tensor {
	p := make([]int, len(t.shape))
	for i := range p {
		p[i] = i
	}
	a, b := normDim("Transpose", d0, len(p)), normDim("Transpose", d1, len(p))
	p[a], p[b] = p[b], p[a]
	return t.Permute(p...)
}

// Narrow returns the part of t with indices [start, start+n) along dim: a view when every
// dim before dim has size 1, else a copy. It panics if the range is outside t.
func (t *Tensor) Narrow(dim, start, n int) *Tensor {
	d := normDim("Narrow", dim, len(t.shape))
	if start < 0 || n < 0 || start+n > t.shape[d] {
		panic(fmt.Sprintf("tensor: Narrow: [%d, %d) of dim %d of %v is out of range", start, start+n, d, t.shape))
	}
	out := narrowRaw(t, d, start, n)
	outer, size, inner := t.shape.Split3(d)
	full := t.shape
	return record1("Narrow", out, []*Tensor{t}, func(gy *Tensor) []*Tensor {
		g := Zeros(gy.Device(), gy.dtype, full...)
		gy.Device().backend.Copy2D(g.Span().at(start*inner), size*inner, gy.Span(), n*inner, outer, n*inner)
		return []*Tensor{g}
	})
}

// narrowRaw is Narrow along the normalized dim d without recording a graph.
func narrowRaw(t *Tensor, d, start, n int) *Tensor {
	outer, size, inner := t.shape.Split3(d)
	shape := t.shape.Clone()
	shape[d] = n
	if outer == 1 {
		return t.view(start*inner, shape)
	}
	out := empty(t.Device(), t.dtype, shape)
	t.Device().backend.Copy2D(out.Span(), n*inner, t.Span().at(start*inner), size*inner, outer, n*inner)
	return out
}

// at returns the span moved forward by off elements (its shape is then meaningless).
func (s Span) at(off int) Span {
	s.Off += off
	return s
}

// Concat joins tensors of the same dtype along dim; their other sizes must agree.
func Concat(dim int, ts ...*Tensor) *Tensor {
	if len(ts) == 0 {
		panic("tensor: Concat: no tensors")
	}
	t0 := ts[0]
	d := normDim("Concat", dim, len(t0.shape))
	shape := t0.shape.Clone()
	shape[d] = 0
	for _, t := range ts {
		s := t.shape.Clone()
		if len(s) != len(shape) || t.dtype != t0.dtype || t.Device() != t0.Device() {
			panic(fmt.Sprintf("tensor: Concat: %v %v with %v %v", t0.dtype, t0.shape, t.dtype, t.shape))
		}
		shape[d] += s[d]
		s[d] = 0
		for i := range s {
			if i != d && s[i] != shape[i] {
				panic(fmt.Sprintf("tensor: Concat: shapes %v and %v differ outside dim %d", t0.shape, t.shape, d))
			}
		}
	}
	out := empty(t0.Device(), t0.dtype, shape)
	outer, total, inner := shape.Split3(d)
	sizes := make([]int, len(ts))
	at := 0
	for i, t := range ts {
		sizes[i] = t.shape[d]
		t0.Device().backend.Copy2D(out.Span().at(at*inner), total*inner, t.Span(), sizes[i]*inner, outer, sizes[i]*inner)
		at += sizes[i]
	}
	record("Concat", []*Tensor{out}, ts, func(gys []*Tensor) []*Tensor {
		return Split(gys[0], d, sizes...)
	})
	return out
}

// Split returns the consecutive parts of t along dim with the given sizes, which must add
// up to t's size at dim: the Narrows of t, as one op whose backward writes the parts'
// gradients into one gradient of t (where separate Narrows would each make a zero-filled
// one and add them).
func Split(t *Tensor, dim int, sizes ...int) []*Tensor {
	d := normDim("Split", dim, len(t.shape))
	sum := 0
	for _, s := range sizes {
		sum += s
	}
	if sum != t.shape[d] {
		panic(fmt.Sprintf("tensor: Split: sizes %v of dim %d of %v add up to %d", sizes, d, t.shape, sum))
	}
	out := make([]*Tensor, len(sizes))
	at := 0
	for i, s := range sizes {
		out[i] = narrowRaw(t, d, at, s)
		at += s
	}
	if len(out) == 0 {
		return out
	}
	outer, size, inner := t.shape.Split3(d)
	full := t.shape
	record("Split", out, []*Tensor{t}, func(gys []*Tensor) []*Tensor {
		dev := gys[0].Device()
		g := empty(dev, gys[0].dtype, full)
		at := 0
		for i, s := range sizes {
			dev.backend.Copy2D(g.Span().at(at*inner), size*inner, gys[i].Span(), s*inner, outer, s*inner)
			at += s
		}
		return []*Tensor{g}
	})
	return out
}

// Chunk splits t into n equal parts along dim. It panics if the size is not divisible by n.
func Chunk(t *Tensor, n, dim int) []*Tensor {
	d := normDim("Chunk", dim, len(t.shape))
	if n <= 0 || t.shape[d]%n != 0 {
		panic(fmt.Sprintf("tensor: Chunk: dim %d of %v (size %d) not divisible into %d chunks", d, t.shape, t.shape[d], n))
	}
	sizes := make([]int, n)
	for i := range sizes {
		sizes[i] = t.shape[d] / n
	}
	return Split(t, d, sizes...)
}

// Cast returns t converted to dtype dt (t itself when it already has it). Floating-point
// narrowing rounds to nearest even; the gradient is cast back.
func (t *Tensor) Cast(dt DType) *Tensor {
	if t.dtype == dt {
		return t
	}
	out := castRaw(t, dt)
	src := t.dtype
	if !dt.IsFloat() || !src.IsFloat() {
		return out // no gradient through integers
	}
	return record1("Cast", out, []*Tensor{t}, func(gy *Tensor) []*Tensor {
		return []*Tensor{gy.Cast(src)}
	})
}

// Clone returns a copy of t with its own storage; the gradient flows through.
func (t *Tensor) Clone() *Tensor {
	out := empty(t.Device(), t.dtype, t.shape)
	t.Device().backend.Copy2D(out.Span(), 0, t.Span(), 0, 1, t.Numel())
	return record1("Clone", out, []*Tensor{t}, func(gy *Tensor) []*Tensor { return []*Tensor{gy} })
}

// Expand returns t broadcast to shape (NumPy rules), as a copy; the gradient is summed
// back over the broadcast dims.
func (t *Tensor) Expand(shape ...int) *Tensor {
	s := Shape(shape).Clone()
	if b, ok := Broadcast(t.shape, s); !ok || !b.Equal(s) {
		panic(fmt.Sprintf("tensor: Expand: %v cannot broadcast to %v", t.shape, s))
	}
	out := empty(t.Device(), t.dtype, s)
	zero := Scalar(t.Device(), t.dtype, 0)
	t.Device().backend.Binary(OpAdd, out.Span(), t.Span(), zero.Span())
	in := t.shape
	return record1("Expand", out, []*Tensor{t}, func(gy *Tensor) []*Tensor {
		return []*Tensor{sumTo(gy, in)}
	})
}

// sumTo sums g over the dims that were broadcast to produce it from shape.
func sumTo(g *Tensor, shape Shape) *Tensor {
	if g.shape.Equal(shape) {
		return g
	}
	lead := len(g.shape) - len(shape)
	var dims []int
	for i := range g.shape {
		if i < lead || (shape[i-lead] == 1 && g.shape[i] != 1) {
			dims = append(dims, i)
		}
	}
	return Sum(g, dims...).Reshape(shape...)
}
