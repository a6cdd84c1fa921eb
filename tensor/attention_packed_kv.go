package tensor

import (
	"fmt"
	"math"
)

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
	buf := make([]float32, g*tiles*2*slot)
	for i := 0; i < len(buf); i += 1024 { // fault the pages in now, not in decoding steps
		buf[i] = 0
	}
	return &PackedKV{kern: kern, maxLen: maxLen, g: g, hs: hs, slot: slot, tiles: tiles, buf: buf}
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

// Write packs the keys and values k, v [1, n, G, HS] (F32) of positions [past, past+n)
// into c.
//
// It panics if k or v is not of that shape and dtype or the positions exceed MaxLen.
func (c *PackedKV) Write(k, v *Tensor, past int) {
	n := k.Dim(1)
	want := Shape{1, n, c.g, c.hs}
	if !k.shape.Equal(want) || !v.shape.Equal(want) || k.dtype != F32 || v.dtype != F32 || past < 0 || past+n > c.maxLen {
		panic(fmt.Sprintf("tensor: PackedKV.Write: k %v %v, v %v %v at position %d: want F32 [1, n, %d, %d] within %d positions",
			k.dtype, k.shape, v.dtype, v.shape, past, c.g, c.hs, c.maxLen))
	}
	ks, vs := raw[float32](k.Span()), raw[float32](v.Span())
	hs, nr, ld := c.hs, c.kern.nr, c.g*c.hs
	for j0 := past; j0 < past+n; { // a run of positions within one nr-wide panel of Kᵀ
		kt, jj0 := j0/attnKTile, j0%attnKTile
		j1 := min(past+n, j0-jj0%nr+nr, (kt+1)*attnKTile)
		for g := range c.g {
			kT, vp := c.tile(g, kt)
			kp := kT[(jj0/nr)*nr*hs:]
			for d := range hs { // Kᵀ: row d of the panel, columns j0…j1−1
				row := kp[d*nr : d*nr+nr]
				for j := j0; j < j1; j++ {
					row[(j-j0+jj0)%nr] = ks[(j-past)*ld+g*hs+d]
				}
			}
			for j := j0; j < j1; j++ { // V: position j's row, nr elements per panel
				src, jj := vs[(j-past)*ld+g*hs:(j-past)*ld+g*hs+hs], j%attnKTile
				for d0 := 0; d0 < hs; d0 += nr {
					copy(vp[(d0/nr)*nr*attnKTile+jj*nr:], src[d0:min(hs, d0+nr)])
				}
			}
		}
		j0 = j1
	}
}

// tile returns the packed Kᵀ and V of key tile kt of head g.
func (c *PackedKV) tile(g, kt int) (kT, v []float32) {
	off := (g*c.tiles + kt) * 2 * c.slot
	return c.buf[off : off+c.slot], c.buf[off+c.slot : off+2*c.slot]
}

// AttentionPacked is AttentionCached(q, k, v, o) for k, v [1, Tk, G, HS] the keys and
// values of positions [0, Tk) that c holds (Write has packed them): the same values bit
// for bit, read from c's panels. For inference on the CPU: it records no gradient, and o
// may set only Scale and Causal.
//
// It panics if q is not F32 [1, NH, Tq, HS] on the CPU with NH a multiple of c's G and
// HS c's, if Tk is not in [1, MaxLen], or if o sets anything but Scale and Causal.
func AttentionPacked(q *Tensor, c *PackedKV, tk int, o AttentionOptions) *Tensor {
	if o.Mask != nil || o.Bias != nil || o.Segments != nil || o.Dropout != 0 || o.DropoutFull != nil || o.DropoutStart != nil {
		panic("tensor: AttentionPacked: options other than Scale and Causal")
	}
	dev := q.Device()
	if _, cpu := dev.backend.(cpuBackend); !cpu || q.dtype != F32 || q.Rank() != 4 || q.shape[0] != 1 ||
		q.shape[1]%c.g != 0 || q.shape[3] != c.hs || tk < 1 || tk > c.maxLen {
		panic(fmt.Sprintf("tensor: AttentionPacked: q %v %v on %v, %d keys of a cache of %d positions of %d heads of %d",
			q.dtype, q.shape, dev, tk, c.maxLen, c.g, c.hs))
	}
	p := AttentionParams{Scale: o.Scale, Causal: o.Causal}
	if p.Scale == 0 {
		p.Scale = 1 / math.Sqrt(float64(c.hs))
	}
	dev.countFused(FusedAttention)
	out := empty(dev, q.dtype, q.shape)
	lse := empty(dev, F32, q.shape[:3])
	defer lse.Release()
	kv := Span{DType: F32, Shape: Shape{1, c.g, tk, c.hs}} // geometry only: the keys come from c
	call := newAttnCall[float32](AttentionArgs{Q: q.Span(), K: kv, V: kv, Out: out.Span(), LSE: lse.Span()}, p)
	if !call.fast || call.kern != c.kern {
		panic("tensor: AttentionPacked: the cache's kernel is not the attention's") // NewPackedKV checked it
	}
	call.pk = c
	call.forward()
	return out
}
