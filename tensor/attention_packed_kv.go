package tensor

import "fmt"

// A KV cache's keys and values kept, besides their position-major tensors, in the panels
// the CPU attention kernel's tile products read (PackedKV), so that attention over the
// cache (AttentionPacked) does not re-pack a sequence's whole history at every decoding
// step: each step packs only its new positions.

// PackedKV holds one sequence's keys and values, for positions [0, MaxLen) of G key/value
// heads of size HS, in the CPU fused attention's packed B operands: per head and key tile
// of attnKTile positions, Kᵀ [HS, attnKTile] and V [attnKTile, HS] in the SGEMM kernel's
// nr-column panels (packB's layout; V's panels attnKTile deep). Which positions are valid
// is the caller's bookkeeping, as for the tensors it mirrors.
type PackedKV struct {
	kern                *gemmKernel
	maxLen, g, hs, slot int
	tiles               int
	buf                 []float32 // [G][tiles][Kᵀ, V][slot]
}

// NewPackedKV returns a zeroed PackedKV of maxLen positions of g heads of size hs for
// keys and values of dtype dt on dev, or nil where AttentionPacked would not read it:
// a backend other than the CPU's, a dtype other than F32, no SIMD kernel, or a head size
// past the kernel's depth. It panics if maxLen, g or hs is < 1.
func NewPackedKV(dev *Device, dt DType, maxLen, g, hs int) *PackedKV {
	if maxLen < 1 || g < 1 || hs < 1 {
		panic(fmt.Sprintf("tensor: NewPackedKV: %d positions, %d heads of %d", maxLen, g, hs))
	}
	kern := packedKVKernel(dev, dt, hs)
	if kern == nil {
		return nil
	}
	tiles := (maxLen + attnKTile - 1) / attnKTile
	slot := roundUp(attnKTile, kern.nr) * roundUp(hs, kern.nr)
	return &PackedKV{kern: kern, maxLen: maxLen, g: g, hs: hs, slot: slot, tiles: tiles,
		buf: make([]float32, g*tiles*2*slot)}
}

// PackedKVBytes returns the memory NewPackedKV(dev, dt, maxLen, g, hs) takes: 0 where it
// returns nil.
func PackedKVBytes(dev *Device, dt DType, maxLen, g, hs int) int64 {
	kern := packedKVKernel(dev, dt, hs)
	if kern == nil {
		return 0
	}
	tiles := (maxLen + attnKTile - 1) / attnKTile
	return 4 * int64(g) * int64(tiles) * 2 * int64(roundUp(attnKTile, kern.nr)*roundUp(hs, kern.nr))
}

// packedKVKernel returns the SGEMM kernel whose panels a PackedKV holds for dt on dev
// with head size hs, or nil where the fused attention's SIMD path does not run.
func packedKVKernel(dev *Device, dt DType, hs int) *gemmKernel {
	if _, cpu := dev.backend.(cpuBackend); !cpu || dt != F32 {
		return nil
	}
	kern := defaultGemmKernel()
	if kern == nil || hs > kern.kc || max(attnQTile, attnKTile) > kern.kc {
		return nil
	}
	return kern
}

// Write packs positions [past, past+n) of k and v ([1, MaxLen, G, HS] F32 position-major
// tensors, a KV cache slot's, already holding them) into c.
//
// It panics if k or v is not of that shape and dtype or the positions exceed MaxLen.
func (c *PackedKV) Write(k, v *Tensor, past, n int) {
	want := Shape{1, c.maxLen, c.g, c.hs}
	if !k.shape.Equal(want) || !v.shape.Equal(want) || k.dtype != F32 || v.dtype != F32 || past < 0 || n < 0 || past+n > c.maxLen {
		panic(fmt.Sprintf("tensor: PackedKV.Write: k %v %v, v %v %v, positions [%d, %d): want F32 %v", k.dtype, k.shape, v.dtype, v.shape, past, past+n, want))
	}
	ks, vs := raw[float32](k.Span()), raw[float32](v.Span())
	hs, nr := c.hs, c.kern.nr
	for j := past; j < past+n; j++ {
		jj := j % attnKTile
		for g := range c.g {
			kT, vp := c.tile(g, j/attnKTile)
			src := (j*c.g + g) * hs
			kcol := kT[(jj/nr)*nr*hs+jj%nr:]
			for d, x := range ks[src : src+hs] {
				kcol[d*nr] = x
				vp[(d/nr)*nr*attnKTile+jj*nr+d%nr] = vs[src+d]
			}
		}
	}
}

// tile returns the packed Kᵀ and V of key tile kt of head g.
func (c *PackedKV) tile(g, kt int) (kT, v []float32) {
	off := (g*c.tiles + kt) * 2 * c.slot
	return c.buf[off : off+c.slot], c.buf[off+c.slot : off+2*c.slot]
}

// AttentionPacked is AttentionCached(q, k, v, o) for k, v [1, Tk, G, HS] the first Tk
// positions of the tensors c mirrors (Write has packed them): the same values bit for
// bit, reading the key tiles' packed panels from c rather than packing them. A nil c
// leaves it AttentionCached.
//
// It panics as AttentionCached does, or if c does not hold k's shape.
func AttentionPacked(q, k, v *Tensor, c *PackedKV, o AttentionOptions) *Tensor {
	if c == nil {
		return AttentionCached(q, k, v, o)
	}
	if k.Rank() != 4 || k.shape[0] != 1 || k.shape[1] > c.maxLen || k.shape[2] != c.g || k.shape[3] != c.hs {
		panic(fmt.Sprintf("tensor: AttentionPacked: k %v in a cache of %d positions of %d heads of %d", k.shape, c.maxLen, c.g, c.hs))
	}
	return attentionCached("AttentionPacked", q, k, v, c, o)
}
