//go:build !purego

#include "textflag.h"

// One-query tile products of the fused attention's forward (cpu_attention_decode.go) on
// AVX-512, reading keys and values in place: each output element is the chain of fused
// multiply-adds the SGEMM micro-kernels compute for it (over k in increasing order from
// zero, then added to the destination when accumulating), so the results are theirs bit
// for bit.

// PREFETCH16(ins) prefetches, with ins, a line at R12 and at the 15 rows after it (R9
// bytes apart, R15 = 3·R9), leaving R12 12 rows on.
#define PREFETCH16(ins) \
	ins (R12); ins (R12)(R9*1); ins (R12)(R9*2); ins (R12)(R15*1); LEAQ (R12)(R9*4), R12; \
	ins (R12); ins (R12)(R9*1); ins (R12)(R9*2); ins (R12)(R15*1); LEAQ (R12)(R9*4), R12; \
	ins (R12); ins (R12)(R9*1); ins (R12)(R9*2); ins (R12)(R15*1); LEAQ (R12)(R9*4), R12; \
	ins (R12); ins (R12)(R9*1); ins (R12)(R9*2); ins (R12)(R15*1)

// func attnRowScoresAVX512(q, k, v *float32, ld, hs, blocks int, s *float32)
// s[16b+l] = Σ_d q[d]·k[(16b+l)·ld+d] for b < blocks, l < 16, d < hs (a multiple of 16):
// per block of 16 keys and 16 columns, the 16 key rows are transposed in registers
// (unpack 32- and 64-bit, then two 128-bit lane shuffles) so that lane l of vector d
// holds key l's column d.
//
// The keys come from memory (a decode step reads every sequence's cache once): each
// chunk prefetches the same columns of the key rows two blocks on into L1, and of the
// block's value rows v (same ld), which attnRowPVAVX512 reads next, into L2. Without,
// the kernel waited on memory for each block (4 KiB at 64-wide heads, ~16 GB/s a core).
// Prefetches past the rows read (never faulting) only cost bandwidth.
TEXT ·attnRowScoresAVX512(SB), NOSPLIT, $0-56
	MOVQ q+0(FP), AX
	MOVQ k+8(FP), BX
	MOVQ v+16(FP), R10
	SUBQ BX, R10 // v − k, bytes
	MOVQ ld+24(FP), R9
	SHLQ $2, R9
	MOVQ hs+32(FP), CX
	MOVQ blocks+40(FP), DX
	MOVQ s+48(FP), DI
	LEAQ (R9)(R9*2), R15
	TESTQ DX, DX
	JE scores_done
scores_block:
	VPXORD Z31, Z31, Z31
	MOVQ BX, R11
	MOVQ AX, SI
	MOVQ CX, R8
scores_chunk:
	LEAQ (R11)(R9*4), R12
	LEAQ (R12)(R9*4), R13
	LEAQ (R13)(R9*4), R14
	VMOVUPS (R11), Z0
	VMOVUPS (R11)(R9*1), Z1
	VMOVUPS (R11)(R9*2), Z2
	VMOVUPS (R11)(R15*1), Z3
	VMOVUPS (R12), Z4
	VMOVUPS (R12)(R9*1), Z5
	VMOVUPS (R12)(R9*2), Z6
	VMOVUPS (R12)(R15*1), Z7
	VMOVUPS (R13), Z8
	VMOVUPS (R13)(R9*1), Z9
	VMOVUPS (R13)(R9*2), Z10
	VMOVUPS (R13)(R15*1), Z11
	VMOVUPS (R14), Z12
	VMOVUPS (R14)(R9*1), Z13
	VMOVUPS (R14)(R9*2), Z14
	VMOVUPS (R14)(R15*1), Z15
	MOVQ R9, R12
	SHLQ $5, R12
	ADDQ R11, R12 // 32 rows on
	PREFETCH16(PREFETCHT0)
	LEAQ (R11)(R10*1), R12 // the values
	PREFETCH16(PREFETCHT1)
	VUNPCKLPS Z1, Z0, Z16
	VUNPCKHPS Z1, Z0, Z17
	VUNPCKLPS Z3, Z2, Z0
	VUNPCKHPS Z3, Z2, Z1
	VUNPCKLPS Z5, Z4, Z2
	VUNPCKHPS Z5, Z4, Z3
	VUNPCKLPS Z7, Z6, Z4
	VUNPCKHPS Z7, Z6, Z5
	VUNPCKLPS Z9, Z8, Z6
	VUNPCKHPS Z9, Z8, Z7
	VUNPCKLPS Z11, Z10, Z8
	VUNPCKHPS Z11, Z10, Z9
	VUNPCKLPS Z13, Z12, Z10
	VUNPCKHPS Z13, Z12, Z11
	VUNPCKLPS Z15, Z14, Z12
	VUNPCKHPS Z15, Z14, Z13
	VUNPCKLPD Z0, Z16, Z14
	VUNPCKHPD Z0, Z16, Z15
	VUNPCKLPD Z1, Z17, Z18
	VUNPCKHPD Z1, Z17, Z19
	VUNPCKLPD Z4, Z2, Z0
	VUNPCKHPD Z4, Z2, Z1
	VUNPCKLPD Z5, Z3, Z16
	VUNPCKHPD Z5, Z3, Z17
	VUNPCKLPD Z8, Z6, Z2
	VUNPCKHPD Z8, Z6, Z3
	VUNPCKLPD Z9, Z7, Z4
	VUNPCKHPD Z9, Z7, Z5
	VUNPCKLPD Z12, Z10, Z6
	VUNPCKHPD Z12, Z10, Z7
	VUNPCKLPD Z13, Z11, Z8
	VUNPCKHPD Z13, Z11, Z9
	VSHUFF32X4 $0x88, Z0, Z14, Z10
	VSHUFF32X4 $0xdd, Z0, Z14, Z11
	VSHUFF32X4 $0x88, Z6, Z2, Z0
	VSHUFF32X4 $0xdd, Z6, Z2, Z12
	VSHUFF32X4 $0x88, Z0, Z10, Z2
	VSHUFF32X4 $0xdd, Z0, Z10, Z6
	VSHUFF32X4 $0x88, Z12, Z11, Z0
	VSHUFF32X4 $0xdd, Z12, Z11, Z10
	VSHUFF32X4 $0x88, Z1, Z15, Z11
	VSHUFF32X4 $0xdd, Z1, Z15, Z12
	VSHUFF32X4 $0x88, Z7, Z3, Z1
	VSHUFF32X4 $0xdd, Z7, Z3, Z13
	VSHUFF32X4 $0x88, Z1, Z11, Z3
	VSHUFF32X4 $0xdd, Z1, Z11, Z7
	VSHUFF32X4 $0x88, Z13, Z12, Z1
	VSHUFF32X4 $0xdd, Z13, Z12, Z11
	VSHUFF32X4 $0x88, Z16, Z18, Z12
	VSHUFF32X4 $0xdd, Z16, Z18, Z13
	VSHUFF32X4 $0x88, Z8, Z4, Z14
	VSHUFF32X4 $0xdd, Z8, Z4, Z15
	VSHUFF32X4 $0x88, Z14, Z12, Z4
	VSHUFF32X4 $0xdd, Z14, Z12, Z8
	VSHUFF32X4 $0x88, Z15, Z13, Z12
	VSHUFF32X4 $0xdd, Z15, Z13, Z14
	VSHUFF32X4 $0x88, Z17, Z19, Z13
	VSHUFF32X4 $0xdd, Z17, Z19, Z15
	VSHUFF32X4 $0x88, Z9, Z5, Z16
	VSHUFF32X4 $0xdd, Z9, Z5, Z17
	VSHUFF32X4 $0x88, Z16, Z13, Z5
	VSHUFF32X4 $0xdd, Z16, Z13, Z9
	VSHUFF32X4 $0x88, Z17, Z15, Z13
	VSHUFF32X4 $0xdd, Z17, Z15, Z16
	VBROADCASTSS 0(SI), Z15
	VFMADD231PS Z15, Z2, Z31
	VBROADCASTSS 4(SI), Z2
	VFMADD231PS Z2, Z3, Z31
	VBROADCASTSS 8(SI), Z2
	VFMADD231PS Z2, Z4, Z31
	VBROADCASTSS 12(SI), Z2
	VFMADD231PS Z2, Z5, Z31
	VBROADCASTSS 16(SI), Z2
	VFMADD231PS Z2, Z0, Z31
	VBROADCASTSS 20(SI), Z0
	VFMADD231PS Z0, Z1, Z31
	VBROADCASTSS 24(SI), Z0
	VFMADD231PS Z0, Z12, Z31
	VBROADCASTSS 28(SI), Z0
	VFMADD231PS Z0, Z13, Z31
	VBROADCASTSS 32(SI), Z0
	VFMADD231PS Z0, Z6, Z31
	VBROADCASTSS 36(SI), Z0
	VFMADD231PS Z0, Z7, Z31
	VBROADCASTSS 40(SI), Z0
	VFMADD231PS Z0, Z8, Z31
	VBROADCASTSS 44(SI), Z0
	VFMADD231PS Z0, Z9, Z31
	VBROADCASTSS 48(SI), Z0
	VFMADD231PS Z0, Z10, Z31
	VBROADCASTSS 52(SI), Z0
	VFMADD231PS Z0, Z11, Z31
	VBROADCASTSS 56(SI), Z0
	VFMADD231PS Z0, Z14, Z31
	VBROADCASTSS 60(SI), Z0
	VFMADD231PS Z0, Z16, Z31
	ADDQ $64, R11
	ADDQ $64, SI
	SUBQ $16, R8
	JNE scores_chunk
	VMOVUPS Z31, (DI)
	ADDQ $64, DI
	MOVQ R9, R12
	SHLQ $4, R12
	ADDQ R12, BX // 16 rows on
	DECQ DX
	JNE scores_block
scores_done:
	VZEROUPPER
	RET

// func attnRowPVAVX512(p, v *float32, ld, n, hs int, o *float32)
// o[c] += Σ_j p[j]·v[j·ld+c] for j < n, c < hs (a multiple of 16): the sum one chain
// from zero over j in order, then added to o; 64 columns at a time, then 16.
TEXT ·attnRowPVAVX512(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), AX
	MOVQ v+8(FP), BX
	MOVQ ld+16(FP), R9
	SHLQ $2, R9
	MOVQ n+24(FP), CX
	MOVQ hs+32(FP), DX
	MOVQ o+40(FP), DI
	TESTQ CX, CX
	JE pv_done
pv_wide:
	CMPQ DX, $64
	JL pv_narrow
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	MOVQ AX, SI
	MOVQ BX, R11
	MOVQ CX, R8
pv_wide_row:
	VBROADCASTSS (SI), Z4
	VFMADD231PS (R11), Z4, Z0
	VFMADD231PS 64(R11), Z4, Z1
	VFMADD231PS 128(R11), Z4, Z2
	VFMADD231PS 192(R11), Z4, Z3
	ADDQ $4, SI
	ADDQ R9, R11
	DECQ R8
	JNE pv_wide_row
	VADDPS (DI), Z0, Z0
	VMOVUPS Z0, (DI)
	VADDPS 64(DI), Z1, Z1
	VMOVUPS Z1, 64(DI)
	VADDPS 128(DI), Z2, Z2
	VMOVUPS Z2, 128(DI)
	VADDPS 192(DI), Z3, Z3
	VMOVUPS Z3, 192(DI)
	ADDQ $256, BX
	ADDQ $256, DI
	SUBQ $64, DX
	JMP pv_wide
pv_narrow:
	TESTQ DX, DX
	JE pv_done
	VPXORD Z0, Z0, Z0
	MOVQ AX, SI
	MOVQ BX, R11
	MOVQ CX, R8
pv_narrow_row:
	VBROADCASTSS (SI), Z4
	VFMADD231PS (R11), Z4, Z0
	ADDQ $4, SI
	ADDQ R9, R11
	DECQ R8
	JNE pv_narrow_row
	VADDPS (DI), Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ $64, BX
	ADDQ $64, DI
	SUBQ $16, DX
	JMP pv_narrow
pv_done:
	VZEROUPPER
	RET
