package cuda

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// naiveOffsets walks shape in row-major order with the given strides, without merging.
func naiveOffsets(shape []int, strides [][]int, i int) []int {
	coords := make([]int, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		coords[d] = i % shape[d]
		i /= shape[d]
	}
	out := make([]int, len(strides))
	for k, st := range strides {
		for d, c := range coords {
			out[k] += c * st[d]
		}
	}
	return out
}

func TestIdxMatchesNaiveWalk(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 300 {
		nd := 1 + r.IntN(7)
		shape := make([]int, nd)
		numel := 1
		for d := range shape {
			shape[d] = 1 + r.IntN(4)
			numel *= shape[d]
		}
		// Operand 0 contiguous, 1 broadcast in random dims, 2 a random permutation.
		st0 := contiguousStrides(shape)
		st1 := contiguousStrides(shape)
		for d := range st1 {
			if r.IntN(3) == 0 {
				st1[d] = 0
			}
		}
		perm := r.Perm(nd)
		permShape := make([]int, nd)
		for i, p := range perm {
			permShape[p] = shape[i]
		}
		ps := contiguousStrides(permShape)
		st2 := make([]int, nd)
		for i, p := range perm {
			st2[i] = ps[p]
		}
		x := newIdx(shape, st0, st1, st2)
		for i := range numel {
			got := x.offsets(int64(i))
			want := naiveOffsets(shape, [][]int{st0, st1, st2}, i)
			for k := range 3 {
				if got[k] != int64(want[k]) {
					t.Fatalf("trial %d shape %v strides %v %v %v: element %d operand %d at %d, want %d (desc %+v)",
						trial, shape, st0, st1, st2, i, k, got[k], want[k], x)
				}
			}
		}
	}
}

func TestIdxMergesContiguousDims(t *testing.T) {
	x := newIdx([]int{2, 1, 3, 4}, contiguousStrides([]int{2, 1, 3, 4}))
	if x.nd != 1 || x.shape[0] != 24 || x.st[0][0] != 1 {
		t.Errorf("contiguous [2 1 3 4]: %+v, want one dim of 24", x)
	}
	// Bias add: a contiguous, b one row broadcast over rows.
	x = newIdx([]int{6, 5, 4}, contiguousStrides([]int{6, 5, 4}), []int{0, 0, 1})
	if x.nd != 2 || x.shape[0] != 30 || x.shape[1] != 4 || x.st[1][0] != 0 || x.st[1][1] != 1 {
		t.Errorf("bias broadcast: %+v, want [30 4] with b strides [0 1]", x)
	}
}

func TestIdxBytesLayout(t *testing.T) {
	x := newIdx([]int{3, 5}, []int{5, 1}, []int{1, 3})
	b := x.bytes()
	if len(b) != 8*(1+8+24) {
		t.Fatalf("%d bytes, want 264", len(b))
	}
	le := binary.LittleEndian
	want := le.AppendUint64(nil, 2)
	if !bytes.Equal(b[:8], want) || le.Uint64(b[8:]) != 3 || le.Uint64(b[16:]) != 5 {
		t.Errorf("nd/shape bytes % x", b[:24])
	}
	// st[1] starts after nd, shape[8] and st[0][8].
	if off := 8 + 64 + 64; le.Uint64(b[off:]) != 1 || le.Uint64(b[off+8:]) != 3 {
		t.Errorf("st[1] = %d %d, want 1 3", le.Uint64(b[off:]), le.Uint64(b[off+8:]))
	}
}

func TestIdxTooManyDimsPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("9 unmergeable dims did not panic")
		}
	}()
	shape := []int{2, 2, 2, 2, 2, 2, 2, 2, 2}
	st := []int{1, 2, 4, 8, 16, 32, 64, 128, 256} // reversed: nothing merges
	newIdx(shape, st)
}

func TestGeometry(t *testing.T) {
	for _, c := range []struct {
		n    int64
		max  int
		want uint32
	}{{1, 100, 1}, {256, 100, 1}, {257, 100, 2}, {1 << 30, 1056, 1056}, {0, 10, 1}} {
		if got := gridFor(c.n, c.max); got != c.want {
			t.Errorf("gridFor(%d, %d) = %d, want %d", c.n, c.max, got, c.want)
		}
	}
	for _, c := range []struct {
		n    int64
		want uint32
	}{{1, 32}, {768, 192}, {50257, 1024}, {129, 32}, {257, 64}} {
		if got := rowBlock(c.n); got != c.want || got%32 != 0 {
			t.Errorf("rowBlock(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}
