// Command gemmgen writes tensor/gemm_amd64.s, the SGEMM micro-kernels of megago's CPU
// backend. It is its own module so that megago's go.mod does not depend on it; the
// generated file is committed. Regenerate from the repository root with
//
//	go run -C internal/gemmgen . -o ../../tensor/gemm_amd64.s
//
// Every kernel computes one register tile of C, with the semantics of gemmTileGo in
// tensor/gemm.go (gemmKernel.tile):
//
//	for k := range kc { for i := range mr { for j := range nr { t[i][j] += a[k·mr+i]·b[k·nr+j] } } }
//	c[i·ldc+j] = t[i][j] (acc == 0) or c[i·ldc+j] += t[i][j] (acc != 0)
//
// where t starts at zero and each += is one fused multiply-add, taken in increasing k. a
// is an mr-row micro-panel of op(A) stored k-major (mr floats per k), or A read in place
// (the RowA and ColA kernels: gemmKernel.tileRowA, tileColA); b an nr-column micro-panel
// of op(B) stored k-major (nr floats per k). The packing routines (packTrans, packCopy)
// fill such panels from A and B in any of their layouts.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"os"
)

// kernel describes one generated micro-kernel.
type kernel struct {
	name   string
	mr     int    // rows of the tile (broadcast from a)
	aw     int    // floats per k step of a packed A panel, when wider than mr (an edge kernel)
	nv     int    // vectors per row of the tile
	width  int    // floats per vector: 16 (zmm) or 8 (ymm)
	reg    string // "Z" or "Y"
	unroll int    // k steps per loop iteration
	bcast  bool   // broadcast a through a register (else an embedded-broadcast operand)
	pfB    int    // prefetch distance in bytes ahead of b (0: none)
	pfC    bool   // prefetch the C tile before the k loop
	pfNext string // prefetch instruction for the next B panel, k·nr floats on (empty: none; see pfNextB)
	rowA   bool   // read A in place (mr rows of stride lda) instead of a packed panel
	colA   bool   // read A in place (mr contiguous values per k, k steps lda apart)
	// rowB reads B in place (nr contiguous floats per k, k steps ldb apart, DI bytes)
	// instead of a packed panel; only with rowA (gemmKernel.tileRowARowB).
	rowB bool
	// part computes part of the tile's k steps (gemmKernel.tilePart; only with rowA): it
	// takes three more arguments, pf, t and part. It prefetches (pfNextB) one cache line
	// per k step from pf on, instead of the next panel; it starts the accumulators from
	// the mr×nr floats at t (part&1) instead of zero, and stores them there (part&2)
	// instead of to C. A float32 stored and loaded back is unchanged, so a tile computed
	// in parts is bitwise the tile computed at once.
	part bool
}

// aStep returns the floats per k step of a packed A panel.
func (k kernel) aStep() int { return max(k.mr, k.aw) }

// inPlace reports whether the kernel reads A in place (with an lda argument).
func (k kernel) inPlace() bool { return k.rowA || k.colA }

// aBases are the registers pointing at rows 0, 4 and 8 of an in-place A.
var aBases = []string{"AX", "R12", "R13"}

// aAddr returns the address of A's element for row i at k step u.
func (k kernel) aAddr(u, i int) string {
	if k.colA { // k step u at AX + u·lda·4
		return fmt.Sprintf("%d(AX)%s", i*4, []string{"", "(R8*1)", "(R8*2)", "(R9*1)"}[u])
	}
	if !k.rowA {
		return fmt.Sprintf("%d(AX)", (u*k.aStep()+i)*4)
	}
	base := aBases[i/4]
	switch i % 4 {
	case 1:
		return fmt.Sprintf("%d(%s)(R8*1)", u*4, base)
	case 2:
		return fmt.Sprintf("%d(%s)(R8*2)", u*4, base)
	case 3:
		return fmt.Sprintf("%d(%s)(R9*1)", u*4, base)
	}
	return fmt.Sprintf("%d(%s)", u*4, base)
}

// advanceA emits the pointer updates after steps k steps.
func (g *gen) advanceA(k kernel, steps int) {
	if k.colA {
		switch steps {
		case 1:
			g.p("ADDQ R8, AX")
		case 4:
			g.p("LEAQ (AX)(R8*4), AX")
		default:
			panic("colA kernels unroll by 4")
		}
		return
	}
	if !k.rowA {
		g.p("ADDQ $%d, AX", steps*k.aStep()*4)
		return
	}
	for b := 0; b < (k.mr+3)/4; b++ {
		g.p("ADDQ $%d, %s", steps*4, aBases[b])
	}
}

func (k kernel) nr() int { return k.nv * k.width }

// acc returns the register accumulating row i, vector v of the tile.
func (k kernel) acc(i, v int) string {
	return fmt.Sprintf("%s%d", k.reg, k.firstAcc()+i*k.nv+v)
}

func (k kernel) firstAcc() int {
	n := k.nv // b vectors
	if k.bcast {
		n += 2 // two broadcast registers, alternating
	}
	return n
}

type gen struct {
	bytes.Buffer
	pfCopyRows int // packCopy prefetches the row this many rows ahead (0: none)
}

// pfCopyRows is how many rows ahead packCopy prefetches src. B read k-major (a Linear's
// dx = dy·W) strides through rows of the weight, a few cache lines per row, which the
// hardware prefetchers did not follow: W1's LM-head dx (256×50304·50304×768, packing W
// from memory) ran 290 GFLOP/s without, 310 with 4 or 8 rows, 302 with 16 (Zen 5 VM, 2
// threads, medians of 3 alternated runs); packTrans prefetching 256-1024 bytes ahead in
// each row changed nothing measurable.
const pfCopyRows = 8

// pfNextB is the instruction with which the AVX-512 kernels prefetch the next B panel
// (b + k·nr floats: packed B panels lie one after another), a k step of it per k step.
// A decode step (32 rows by pre-packed weights streamed from memory; macro then computes
// the 3 tiles of each B panel in a row, gemmFewPanels) ran 290 GFLOP/s against 250
// without, as a panel then loads during three tiles instead of stalling the first: 17
// GB/s of weights, what SumSquares reads on this machine. PREFETCHT0 measured the same,
// prefetching 2 or 3 panels ahead 270 and 260 (Zen 5 VM, 2 threads,
// BenchmarkSgemmPacked/step_32 alternated). For B blocks already in L2 it costs two
// prefetches per k step: the kernel's peak (BenchmarkSgemmTile) did not change, and the
// workload shapes ran as fast or faster (bench/results/2026-12-02-gemm-shapes.txt).
const pfNextB = "PREFETCHT1"

func (g *gen) p(format string, args ...any) { fmt.Fprintf(&g.Buffer, "\t"+format+"\n", args...) }
func (g *gen) label(l string)               { fmt.Fprintf(&g.Buffer, "%s:\n", l) }

func (g *gen) kernel(k kernel) {
	nr := k.nr()
	vb := k.width * 4 // bytes per vector
	accArg := "acc+40(FP)"
	if k.inPlace() {
		frame := 56
		switch {
		case k.rowB:
			frame = 64
			fmt.Fprintf(&g.Buffer, "\n// func %s(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, acc int)\n", k.name)
			fmt.Fprintf(&g.Buffer, "// %d×%d tile, %d-wide vectors, A and B read in place (rows lda and ldb floats apart).\n", k.mr, nr, k.width)
		case k.part:
			frame = 80
			fmt.Fprintf(&g.Buffer, "\n// func %s(k int, a *float32, lda int, b, c *float32, ldc int, acc int, pf, t *float32, part int)\n", k.name)
			fmt.Fprintf(&g.Buffer, "// %d×%d tile, %d-wide vectors, A read in place (rows lda floats apart), computed in\n", k.mr, nr, k.width)
			fmt.Fprintf(&g.Buffer, "// parts: accumulators from t (part&1) or zero, to t (part&2) or C; prefetches a\n// cache line from pf on per k step.\n")
		default:
			fmt.Fprintf(&g.Buffer, "\n// func %s(k int, a *float32, lda int, b, c *float32, ldc int, acc int)\n", k.name)
		}
		switch {
		case k.rowB || k.part:
		case k.rowA:
			fmt.Fprintf(&g.Buffer, "// %d×%d tile, %d-wide vectors, A read in place (rows lda floats apart).\n", k.mr, nr, k.width)
		default:
			fmt.Fprintf(&g.Buffer, "// %d×%d tile, %d-wide vectors, A read in place (k steps lda floats apart).\n", k.mr, nr, k.width)
		}
		fmt.Fprintf(&g.Buffer, "TEXT ·%s(SB), NOSPLIT, $0-%d\n", k.name, frame)
		g.p("MOVQ k+0(FP), CX")
		g.p("MOVQ a+8(FP), AX")
		g.p("MOVQ lda+16(FP), R8")
		g.p("SHLQ $2, R8")
		g.p("LEAQ (R8)(R8*2), R9")
		for b := 1; k.rowA && b < (k.mr+3)/4; b++ {
			g.p("LEAQ (%s)(R8*4), %s", aBases[b-1], aBases[b])
		}
		g.p("MOVQ b+24(FP), BX")
		if k.rowB {
			g.p("MOVQ ldb+32(FP), DI")
			g.p("SHLQ $2, DI")
			g.p("MOVQ c+40(FP), DX")
			g.p("MOVQ ldc+48(FP), SI")
			accArg = "acc+56(FP)"
		} else {
			g.p("MOVQ c+32(FP), DX")
			g.p("MOVQ ldc+40(FP), SI")
			accArg = "acc+48(FP)"
		}
		if k.part {
			g.p("MOVQ pf+56(FP), R11")
			g.p("MOVQ t+64(FP), DI")
		}
	} else {
		fmt.Fprintf(&g.Buffer, "\n// func %s(k int, a, b, c *float32, ldc int, acc int)\n", k.name)
		fmt.Fprintf(&g.Buffer, "// %d×%d tile, %d-wide vectors.\n", k.mr, nr, k.width)
		if k.aw > 0 {
			fmt.Fprintf(&g.Buffer, "// A packed in panels %d wide (the first %d rows of one).\n", k.aw, k.mr)
		}
		fmt.Fprintf(&g.Buffer, "TEXT ·%s(SB), NOSPLIT, $0-48\n", k.name)
		g.p("MOVQ k+0(FP), CX")
		g.p("MOVQ a+8(FP), AX")
		g.p("MOVQ b+16(FP), BX")
		g.p("MOVQ c+24(FP), DX")
		g.p("MOVQ ldc+32(FP), SI")
	}
	g.p("SHLQ $2, SI")
	if k.pfNext != "" && !k.rowB {
		g.p("IMUL3Q $%d, CX, R11", nr*4) // bytes from a k step of b to the next panel's
	}
	if k.pfC {
		g.p("MOVQ DX, R10")
		for i := 0; i < k.mr; i++ {
			for l := 0; l < nr*4; l += 64 {
				g.p("PREFETCHT0 %d(R10)", l)
			}
			if i < k.mr-1 {
				g.p("ADDQ SI, R10")
			}
		}
	}
	if k.part { // R10 (C's prefetch pointer) is free from here
		g.p("MOVQ part+72(FP), R10")
		g.p("TESTQ $1, R10")
		g.p("JE %s_zero", k.name)
		for i := 0; i < k.mr; i++ {
			for v := 0; v < k.nv; v++ {
				g.p("VMOVUPS %d(DI), %s", (i*k.nv+v)*vb, k.acc(i, v))
			}
		}
		g.p("JMP %s_init", k.name)
		g.label(k.name + "_zero")
	}
	for i := 0; i < k.mr; i++ {
		for v := 0; v < k.nv; v++ {
			r := k.acc(i, v)
			if k.reg == "Z" {
				g.p("VPXORD %s, %s, %s", r, r, r) // EVEX: AVX-512F
			} else {
				g.p("VXORPS %s, %s, %s", r, r, r)
			}
		}
	}
	if k.part {
		g.label(k.name + "_init")
	}
	step := func(u int) { // one k step at offset u
		bOff := u * nr * 4
		if k.rowB { // BX advances a row per step; the next panel is the row's next nr floats
			bOff = 0
		}
		for v := 0; v < k.nv; v++ {
			g.p("VMOVUPS %d(BX), %s%d", bOff+v*vb, k.reg, v)
		}
		for l := 0; k.pfNext != "" && l < nr*4; l += 64 {
			if k.rowB {
				g.p("%s %d(BX)", k.pfNext, nr*4+l)
			} else {
				g.p("%s %d(BX)(R11*1)", k.pfNext, u*nr*4+l)
			}
		}
		if k.part {
			g.p("%s %d(R11)", pfNextB, u*64)
		}
		if k.pfB > 0 && (u*nr*4)%64 == 0 {
			g.p("PREFETCHT0 %d(BX)", u*nr*4+k.pfB)
		}
		for i := 0; i < k.mr; i++ {
			if k.bcast {
				br := fmt.Sprintf("%s%d", k.reg, k.nv+i%2)
				g.p("VBROADCASTSS %s, %s", k.aAddr(u, i), br)
				for v := 0; v < k.nv; v++ {
					g.p("VFMADD231PS %s, %s%d, %s", br, k.reg, v, k.acc(i, v))
				}
				continue
			}
			for v := 0; v < k.nv; v++ {
				g.p("VFMADD231PS.BCST %s, %s%d, %s", k.aAddr(u, i), k.reg, v, k.acc(i, v))
			}
		}
		if k.rowB {
			g.p("ADDQ DI, BX")
		}
	}
	l := k.name
	g.p("CMPQ CX, $%d", k.unroll)
	g.p("JL %s_tail", l)
	g.label(l + "_loop")
	for u := 0; u < k.unroll; u++ {
		step(u)
	}
	g.advanceA(k, k.unroll)
	if !k.rowB {
		g.p("ADDQ $%d, BX", k.unroll*nr*4)
	}
	if k.part {
		g.p("ADDQ $%d, R11", k.unroll*64)
	}
	g.p("SUBQ $%d, CX", k.unroll)
	g.p("CMPQ CX, $%d", k.unroll)
	g.p("JGE %s_loop", l)
	g.label(l + "_tail")
	g.p("TESTQ CX, CX")
	g.p("JE %s_store", l)
	step(0)
	g.advanceA(k, 1)
	if !k.rowB {
		g.p("ADDQ $%d, BX", nr*4)
	}
	if k.part {
		g.p("ADDQ $64, R11")
	}
	g.p("DECQ CX")
	g.p("JMP %s_tail", l)
	g.label(l + "_store")
	if k.part {
		g.p("TESTQ $2, R10")
		g.p("JE %s_c", l)
		for i := 0; i < k.mr; i++ {
			for v := 0; v < k.nv; v++ {
				g.p("VMOVUPS %s, %d(DI)", k.acc(i, v), (i*k.nv+v)*vb)
			}
		}
		g.p("JMP %s_done", l)
		g.label(l + "_c")
	}
	g.p("MOVQ %s, R8", accArg)
	g.p("TESTQ R8, R8")
	g.p("JE %s_set", l)
	for i := 0; i < k.mr; i++ {
		for v := 0; v < k.nv; v++ {
			g.p("VADDPS %d(DX), %s, %s", v*vb, k.acc(i, v), k.acc(i, v))
			g.p("VMOVUPS %s, %d(DX)", k.acc(i, v), v*vb)
		}
		if i < k.mr-1 {
			g.p("ADDQ SI, DX")
		}
	}
	g.p("JMP %s_done", l)
	g.label(l + "_set")
	for i := 0; i < k.mr; i++ {
		for v := 0; v < k.nv; v++ {
			g.p("VMOVUPS %s, %d(DX)", k.acc(i, v), v*vb)
		}
		if i < k.mr-1 {
			g.p("ADDQ SI, DX")
		}
	}
	g.label(l + "_done")
	g.p("VZEROUPPER")
	g.p("RET")
}

// transpose16 emits a 16×16 float transpose: rows in Z0..Z15 become columns in the
// registers returned (out[c] holds column c), using Z16..Z31 as scratch.
func (g *gen) transpose16() (out [16]int) {
	// Stage 1: interleave floats of row pairs (within 128-bit lanes).
	for i := 0; i < 8; i++ {
		g.p("VUNPCKLPS Z%d, Z%d, Z%d", 2*i+1, 2*i, 16+2*i)
		g.p("VUNPCKHPS Z%d, Z%d, Z%d", 2*i+1, 2*i, 16+2*i+1)
	}
	// Stage 2: interleave pairs: u[4i+q] holds, in lane L, rows 4i..4i+3 of column 4L+q.
	for i := 0; i < 4; i++ {
		t := 16 + 4*i
		g.p("VUNPCKLPD Z%d, Z%d, Z%d", t+2, t, 4*i)
		g.p("VUNPCKHPD Z%d, Z%d, Z%d", t+2, t, 4*i+1)
		g.p("VUNPCKLPD Z%d, Z%d, Z%d", t+3, t+1, 4*i+2)
		g.p("VUNPCKHPD Z%d, Z%d, Z%d", t+3, t+1, 4*i+3)
	}
	// Stages 3 and 4: gather lane L of u[q], u[4+q], u[8+q], u[12+q] into column 4L+q.
	for q := 0; q < 4; q++ {
		a, b, c, d := q, 4+q, 8+q, 12+q
		v := 16 + 4*q
		g.p("VSHUFF32X4 $0x88, Z%d, Z%d, Z%d", b, a, v)     // A0 A2 B0 B2
		g.p("VSHUFF32X4 $0xDD, Z%d, Z%d, Z%d", b, a, v+1)   // A1 A3 B1 B3
		g.p("VSHUFF32X4 $0x88, Z%d, Z%d, Z%d", d, c, v+2)   // C0 C2 D0 D2
		g.p("VSHUFF32X4 $0xDD, Z%d, Z%d, Z%d", d, c, v+3)   // C1 C3 D1 D3
		g.p("VSHUFF32X4 $0x88, Z%d, Z%d, Z%d", v+2, v, a)   // column q
		g.p("VSHUFF32X4 $0xDD, Z%d, Z%d, Z%d", v+2, v, c)   // column 8+q
		g.p("VSHUFF32X4 $0x88, Z%d, Z%d, Z%d", v+3, v+1, b) // column 4+q
		g.p("VSHUFF32X4 $0xDD, Z%d, Z%d, Z%d", v+3, v+1, d) // column 12+q
		out[q], out[4+q], out[8+q], out[12+q] = a, b, c, d
	}
	return out
}

// loadRows emits loads of up to n rows (registers reg0 … reg(n-1)) of vectors from R9,
// row stride R8, for panel rows first … first+n-1 of which only those below R10 (the
// panel's valid rows) and below w are read; the others are zeroed.
func (g *gen) loadRows(label, reg string, n, first, w int) {
	zero := func(r int) string { return fmt.Sprintf("%s_zero%d", label, r) }
	for r := 0; r < n; r++ {
		if first+r >= w {
			g.p("JMP %s", zero(r))
			break
		}
		g.p("CMPQ R10, $%d", first+r)
		g.p("JLE %s", zero(r))
		g.p("VMOVUPS (R9), %s%d", reg, r)
		g.p("ADDQ R8, R9")
	}
	g.p("JMP %s_loaded", label)
	for r := 0; r < n; r++ {
		g.label(zero(r))
		if reg == "Z" {
			g.p("VPXORD Z%d, Z%d, Z%d", r, r, r)
		} else {
			g.p("VXORPS Y%d, Y%d, Y%d", r, r, r)
		}
	}
	g.label(label + "_loaded")
}

// transPrologue emits the head of a transposing pack that takes square blocks of side
// 1<<shift: DI dst, SI src, R8 the row stride in bytes, R11 that of a block of rows, R10
// the valid rows, CX the number of column blocks; then the loop label.
func (g *gen) transPrologue(name string, w, shift int) {
	fmt.Fprintf(&g.Buffer, "\n// func %s(dst, src *float32, ld, k, rows int)\n", name)
	fmt.Fprintf(&g.Buffer, "// Transposes a %d-row panel (rows past rows read as zeros), %d columns at a time;\n// k must be a multiple of 16.\n", w, 1<<shift)
	fmt.Fprintf(&g.Buffer, "TEXT ·%s(SB), NOSPLIT, $0-40\n", name)
	g.p("MOVQ dst+0(FP), DI")
	g.p("MOVQ src+8(FP), SI")
	g.p("MOVQ ld+16(FP), R8")
	g.p("SHLQ $2, R8")
	g.p("MOVQ k+24(FP), CX")
	g.p("MOVQ rows+32(FP), R10")
	g.p("SHRQ $%d, CX", shift)
	g.p("JE %s_done", name)
	g.p("MOVQ R8, R11")
	g.p("SHLQ $%d, R11", shift)
	g.label(name + "_loop")
}

// packTrans12 is packTrans for 12-row panels by 4×4 transposes within the 128-bit lanes
// (rows 4g…4g+3 of 16 columns), storing each column's 12 floats as three aligned 16-byte
// pieces: a 16×16 transpose would waste a quarter of its work on absent rows and store
// 64 bytes at a 48-byte stride, splitting cache lines.
func (g *gen) packTrans12(name string) {
	const w = 12
	g.transPrologue(name, w, 4)
	g.p("MOVQ SI, R9")
	g.loadRows(name+"_h0", "Z", 12, 0, w)
	for grp := 0; grp < 3; grp++ {
		r := 4 * grp
		g.p("VUNPCKLPS Z%d, Z%d, Z12", r+1, r)
		g.p("VUNPCKHPS Z%d, Z%d, Z13", r+1, r)
		g.p("VUNPCKLPS Z%d, Z%d, Z14", r+3, r+2)
		g.p("VUNPCKHPS Z%d, Z%d, Z15", r+3, r+2)
		g.p("VUNPCKLPD Z14, Z12, Z16") // column 4L
		g.p("VUNPCKHPD Z14, Z12, Z17") // column 4L+1
		g.p("VUNPCKLPD Z15, Z13, Z18") // column 4L+2
		g.p("VUNPCKHPD Z15, Z13, Z19") // column 4L+3
		for q := 0; q < 4; q++ {
			for lane := 0; lane < 4; lane++ {
				off := (4*lane+q)*w*4 + grp*16
				if lane == 0 {
					g.p("VMOVUPS X%d, %d(DI)", 16+q, off)
				} else {
					g.p("VEXTRACTF32X4 $%d, Z%d, %d(DI)", lane, 16+q, off)
				}
			}
		}
	}
	g.p("ADDQ $64, SI")
	g.p("ADDQ $%d, DI", 16*w*4)
	g.p("DECQ CX")
	g.p("JNE %s_loop", name)
	g.label(name + "_done")
	g.p("VZEROUPPER")
	g.p("RET")
}

// packTrans emits func name(dst, src *float32, ld, k, rows int): it packs a panel of w
// rows of src (row stride ld floats; w a multiple of 16) over k columns (a multiple of
// 16) k-major: dst[kk·w + r] = src[r·ld + kk], rows r ≥ rows zero and not read.
func (g *gen) packTrans(name string, w int) {
	g.transPrologue(name, w, 4)
	halves := (w + 15) / 16
	for h := 0; h < halves; h++ {
		g.p("MOVQ SI, R9")
		if h > 0 {
			g.p("ADDQ R11, R9")
		}
		g.loadRows(fmt.Sprintf("%s_h%d", name, h), "Z", 16, 16*h, w)
		out := g.transpose16()
		for c := 0; c < 16; c++ {
			g.p("VMOVUPS Z%d, %d(DI)", out[c], c*w*4+h*64)
		}
	}
	g.p("ADDQ $64, SI")
	g.p("ADDQ $%d, DI", 16*w*4)
	g.p("DECQ CX")
	g.p("JNE %s_loop", name)
	g.label(name + "_done")
	g.p("VZEROUPPER")
	g.p("RET")
}

// packCopy emits func name(dst, src *float32, ld, k, panels int): it packs panels
// w-column panels of src (row stride ld floats; panel p is columns p·w … p·w+w-1) over k
// rows: dst[p·w·k + kk·w + c] = src[kk·ld + p·w + c]. Rows of src are read in order.
func (g *gen) packCopy(name string, w int) {
	fmt.Fprintf(&g.Buffer, "\n// func %s(dst, src *float32, ld, k, panels int)\n", name)
	fmt.Fprintf(&g.Buffer, "// Copies %d-float row pieces, row by row of src.\n", w)
	fmt.Fprintf(&g.Buffer, "TEXT ·%s(SB), NOSPLIT, $0-40\n", name)
	g.p("MOVQ dst+0(FP), DI")
	g.p("MOVQ src+8(FP), SI")
	g.p("MOVQ ld+16(FP), R8")
	g.p("SHLQ $2, R8")
	g.p("MOVQ k+24(FP), CX")
	g.p("MOVQ panels+32(FP), DX")
	g.p("TESTQ DX, DX")
	g.p("JE %s_done", name)
	g.p("MOVQ CX, R10")
	g.p("IMULQ $%d, R10", w*4) // bytes between panels in dst
	g.p("TESTQ CX, CX")
	g.p("JE %s_done", name)
	if g.pfCopyRows > 0 {
		g.p("IMUL3Q $%d, R8, R9", g.pfCopyRows) // bytes to the row prefetched
	}
	g.label(name + "_row")
	g.p("MOVQ SI, R11")
	g.p("MOVQ DI, R12")
	g.p("MOVQ DX, R13")
	g.label(name + "_panel")
	switch w {
	case 32:
		g.p("VMOVUPS (R11), Z0")
		g.p("VMOVUPS 64(R11), Z1")
		g.p("VMOVUPS Z0, (R12)")
		g.p("VMOVUPS Z1, 64(R12)")
	case 12: // 8 + 4 floats (masked stores are slow on some CPUs)
		g.p("VMOVUPS (R11), Y0")
		g.p("VMOVUPS 32(R11), X1")
		g.p("VMOVUPS Y0, (R12)")
		g.p("VMOVUPS X1, 32(R12)")
	case 16:
		g.p("VMOVUPS (R11), Y0")
		g.p("VMOVUPS 32(R11), Y1")
		g.p("VMOVUPS Y0, (R12)")
		g.p("VMOVUPS Y1, 32(R12)")
	case 6:
		g.p("VMOVUPS (R11), X0")
		g.p("MOVQ 16(R11), AX")
		g.p("VMOVUPS X0, (R12)")
		g.p("MOVQ AX, 16(R12)")
	}
	if g.pfCopyRows > 0 {
		for l := 0; l < w*4; l += 64 {
			g.p("PREFETCHT0 %d(R11)(R9*1)", l)
		}
	}
	g.p("ADDQ $%d, R11", w*4)
	g.p("ADDQ R10, R12")
	g.p("DECQ R13")
	g.p("JNE %s_panel", name)
	g.p("ADDQ R8, SI")
	g.p("ADDQ $%d, DI", w*4)
	g.p("DECQ CX")
	g.p("JNE %s_row", name)
	g.label(name + "_done")
	g.p("VZEROUPPER")
	g.p("RET")
}

// transpose8 emits an 8×8 float transpose: rows in Y0..Y7 become columns in the
// registers returned (out[c] holds column c), using Y8..Y15 as scratch.
func (g *gen) transpose8() (out [8]int) {
	for i := 0; i < 4; i++ { // t[2i], t[2i+1]: rows 2i, 2i+1 interleaved
		g.p("VUNPCKLPS Y%d, Y%d, Y%d", 2*i+1, 2*i, 8+2*i)
		g.p("VUNPCKHPS Y%d, Y%d, Y%d", 2*i+1, 2*i, 8+2*i+1)
	}
	for h := 0; h < 2; h++ { // rows 4h..4h+3: tt[4h+q] holds column 4L+q in lane L
		t := 8 + 4*h
		g.p("VSHUFPS $0x44, Y%d, Y%d, Y%d", t+2, t, 4*h)
		g.p("VSHUFPS $0xEE, Y%d, Y%d, Y%d", t+2, t, 4*h+1)
		g.p("VSHUFPS $0x44, Y%d, Y%d, Y%d", t+3, t+1, 4*h+2)
		g.p("VSHUFPS $0xEE, Y%d, Y%d, Y%d", t+3, t+1, 4*h+3)
	}
	for q := 0; q < 4; q++ {
		g.p("VPERM2F128 $0x20, Y%d, Y%d, Y%d", 4+q, q, 8+q)
		g.p("VPERM2F128 $0x31, Y%d, Y%d, Y%d", 4+q, q, 12+q)
		out[q], out[4+q] = 8+q, 12+q
	}
	return out
}

// packTrans8 is packTrans for AVX2: w is 16 (two 8-row halves) or 6 (rows 6 and 7 zero).
func (g *gen) packTrans8(name string, w int) {
	g.transPrologue(name, w, 3)
	for h := 0; h < (w+7)/8; h++ {
		g.p("MOVQ SI, R9")
		if h > 0 {
			g.p("ADDQ R11, R9")
		}
		g.loadRows(fmt.Sprintf("%s_h%d", name, h), "Y", 8, 8*h, w)
		out := g.transpose8()
		for c := 0; c < 8; c++ {
			switch {
			case w == 16:
				g.p("VMOVUPS Y%d, %d(DI)", out[c], c*w*4+h*32)
			case c < 7: // 8 floats; the next column overwrites the two extra
				g.p("VMOVUPS Y%d, %d(DI)", out[c], c*w*4)
			default:
				g.p("VMOVUPS X%d, %d(DI)", out[c], c*w*4)
				g.p("VEXTRACTF128 $1, Y%d, X%d", out[c], out[0])
				g.p("VMOVLPS X%d, %d(DI)", out[0], c*w*4+16)
			}
		}
	}
	g.p("ADDQ $32, SI")
	g.p("ADDQ $%d, DI", 8*w*4)
	g.p("DECQ CX")
	g.p("JNE %s_loop", name)
	g.label(name + "_done")
	g.p("VZEROUPPER")
	g.p("RET")
}

// kernels are the micro-kernels tensor/gemm_amd64.go declares. 12×32 (AVX-512) and 6×16
// (AVX2) keep 24 and 12 accumulators: enough independent FMA chains to cover the FMA
// latency at two FMAs per cycle, with registers left for the B vectors and broadcasts.
// Broadcasting A through a register measured faster than embedded-broadcast operands.
//
// The Edge, RowA and ColA kernels with 4 or 8 rows compute the last, partial panel of
// A's rows (M mod 12 is 4 or 8 whenever M is a multiple of 4) without the work of 12.
var kernels = []kernel{
	{name: "sgemmKernelAVX512", mr: 12, nv: 2, width: 16, reg: "Z", unroll: 4, bcast: true, pfC: true, pfNext: pfNextB},
	{name: "sgemmKernelAVX2", mr: 6, nv: 2, width: 8, reg: "Y", unroll: 4, bcast: true},
	{name: "sgemmKernelRowAAVX512", mr: 12, nv: 2, width: 16, reg: "Z", unroll: 4, bcast: true, pfC: true, rowA: true, pfNext: pfNextB},
	{name: "sgemmKernelRowAAVX2", mr: 6, nv: 2, width: 8, reg: "Y", unroll: 4, bcast: true, rowA: true},
	{name: "sgemmKernelColAAVX512", mr: 12, nv: 2, width: 16, reg: "Z", unroll: 4, bcast: true, pfC: true, colA: true, pfNext: pfNextB},
	{name: "sgemmKernelColAAVX2", mr: 6, nv: 2, width: 8, reg: "Y", unroll: 4, bcast: true, colA: true},
	{name: "sgemmKernelEdge4AVX512", mr: 4, aw: 12, nv: 2, width: 16, reg: "Z", unroll: 4, bcast: true, pfC: true, pfNext: pfNextB},
	{name: "sgemmKernelEdge8AVX512", mr: 8, aw: 12, nv: 2, width: 16, reg: "Z", unroll: 4, bcast: true, pfC: true, pfNext: pfNextB},
	{name: "sgemmKernelRowA4AVX512", mr: 4, nv: 2, width: 16, reg: "Z", unroll: 4, bcast: true, pfC: true, rowA: true, pfNext: pfNextB},
	{name: "sgemmKernelRowA8AVX512", mr: 8, nv: 2, width: 16, reg: "Z", unroll: 4, bcast: true, pfC: true, rowA: true, pfNext: pfNextB},
	{name: "sgemmKernelColA4AVX512", mr: 4, nv: 2, width: 16, reg: "Z", unroll: 4, bcast: true, pfC: true, colA: true, pfNext: pfNextB},
	{name: "sgemmKernelColA8AVX512", mr: 8, nv: 2, width: 16, reg: "Z", unroll: 4, bcast: true, pfC: true, colA: true, pfNext: pfNextB},
	{name: "sgemmKernelRowABAVX512", mr: 12, nv: 2, width: 16, reg: "Z", unroll: 4, bcast: true, pfC: true, rowA: true, rowB: true, pfNext: pfNextB},
	{name: "sgemmKernelRowAB4AVX512", mr: 4, nv: 2, width: 16, reg: "Z", unroll: 4, bcast: true, pfC: true, rowA: true, rowB: true, pfNext: pfNextB},
	{name: "sgemmKernelRowAB8AVX512", mr: 8, nv: 2, width: 16, reg: "Z", unroll: 4, bcast: true, pfC: true, rowA: true, rowB: true, pfNext: pfNextB},
	{name: "sgemmKernelRowAPartAVX512", mr: 12, nv: 2, width: 16, reg: "Z", unroll: 4, bcast: true, pfC: true, rowA: true, part: true},
	{name: "sgemmKernelRowAPart4AVX512", mr: 4, nv: 2, width: 16, reg: "Z", unroll: 4, bcast: true, pfC: true, rowA: true, part: true},
	{name: "sgemmKernelRowAPart8AVX512", mr: 8, nv: 2, width: 16, reg: "Z", unroll: 4, bcast: true, pfC: true, rowA: true, part: true},
}

func main() {
	out := flag.String("o", "gemm_amd64.s", "output file")
	pfCopy := flag.Int("pfcopy", pfCopyRows, "rows ahead packCopy prefetches (0: none)")
	flag.Parse()
	g := gen{pfCopyRows: *pfCopy}
	g.WriteString("// Code generated by internal/gemmgen; DO NOT EDIT.\n\n//go:build !purego\n\n#include \"textflag.h\"\n")
	for _, k := range kernels {
		g.kernel(k)
	}
	g.packTrans("sgemmPackTrans32AVX512", 32)
	g.packTrans12("sgemmPackTrans12AVX512")
	g.packCopy("sgemmPackCopy32AVX512", 32)
	g.packCopy("sgemmPackCopy12AVX512", 12)
	g.packTrans8("sgemmPackTrans16AVX2", 16)
	g.packTrans8("sgemmPackTrans6AVX2", 6)
	g.packCopy("sgemmPackCopy16AVX2", 16)
	g.packCopy("sgemmPackCopy6AVX2", 6)
	if err := os.WriteFile(*out, g.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}
