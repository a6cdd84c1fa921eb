package tensor

// One-query tiles of the forward (cpu_attention.go): the last query tile of a head when
// Tq = 1 (mod attnQTile), which is every tile of a decode step's one-token sequences. On
// AVX-512 with a head size a multiple of 16, their two products read the keys and values
// in place instead of packing them (cpu_attention_decode_amd64.s): the scores transpose
// 16 key rows at a time in registers, the output accumulates value rows as they stream.
// A one-query tile's single row sees every key of the tile (it is the last query), and
// each product's element is the fused multiply-add chain the SGEMM kernels compute for
// it, so the outputs are the packed path's bit for bit.

// attnRowBlock is the keys a block of the scores kernel takes.
const attnRowBlock = 16

// rowInPlace reports whether a query tile of bq rows takes the in-place products.
func (c *attnCall[T]) rowInPlace(bq int) bool {
	return bq == 1 && c.fast && hasAttnRowAVX512 && c.hs%attnRowBlock == 0
}

// rowScores sets s [w] to the scores q [HS] · Kᵀ of the w keys of key/value head kvh
// from position j0, read in place.
func (c *attnCall[T]) rowScores(t *attnTiles[T], s, q []T, kvh, j0, w int) {
	hs := c.hs
	k, v, ld := c.kvRows(kvh, j0, w)
	s32, q32, k32, v32 := any(s).([]float32), any(q).([]float32), any(k).([]float32), any(v).([]float32)
	full := w / attnRowBlock
	if full > 0 {
		_ = k32[(full*attnRowBlock-1)*ld+hs-1] // bounds the kernel's reads
		attnRowScoresAVX512(&q32[0], &k32[0], &v32[0], ld, hs, full, &s32[0])
	}
	rest := w - full*attnRowBlock
	if rest == 0 {
		return
	}
	// The last keys, copied into a block: the kernel reads 16 whole rows, but lane l of
	// its scores depends on row l only, so the rows after them (zeros, or keys an earlier
	// call copied) need no clearing.
	t.rowTail = grow(t.rowTail, attnRowBlock*(hs+1))
	blk, out := t.rowTail[:attnRowBlock*hs], t.rowTail[attnRowBlock*hs:]
	for r := range rest {
		src := k32[(full*attnRowBlock+r)*ld:]
		copy(blk[r*hs:(r+1)*hs], src[:hs])
	}
	attnRowScoresAVX512(&q32[0], &blk[0], &blk[0], hs, hs, 1, &out[0])
	copy(s32[full*attnRowBlock:w], out[:rest])
}

// rowValues adds p [w] · V to o [HS] for the w values of key/value head kvh from
// position j0, read in place.
func (c *attnCall[T]) rowValues(o, p []T, kvh, j0, w int) {
	_, v, ld := c.kvRows(kvh, j0, w)
	o32, p32, v32 := any(o).([]float32), any(p).([]float32), any(v).([]float32)
	_, _ = o32[c.hs-1], p32[w-1]
	attnRowPVAVX512(&p32[0], &v32[0], ld, w, c.hs, &o32[0])
}
