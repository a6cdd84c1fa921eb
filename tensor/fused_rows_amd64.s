//go:build !purego

#include "textflag.h"

// Philox-4x32-10 for eight blocks at once (one per 64-bit lane, each word in the low half
// of a lane), for the dropout mask of the row-wise fused ops (cpu_fused_rows_rng.go).

DATA philoxLanes<>+0x00(SB)/8, $0
DATA philoxLanes<>+0x08(SB)/8, $1
DATA philoxLanes<>+0x10(SB)/8, $2
DATA philoxLanes<>+0x18(SB)/8, $3
DATA philoxLanes<>+0x20(SB)/8, $4
DATA philoxLanes<>+0x28(SB)/8, $5
DATA philoxLanes<>+0x30(SB)/8, $6
DATA philoxLanes<>+0x38(SB)/8, $7
GLOBL philoxLanes<>(SB), RODATA|NOPTR, $64

// PHILOXROUND is one round on the counter words Z0..Z3 with keys Z4, Z5 (multipliers
// Z6, Z7, key increments Z8, Z9, low-half mask Z10; Z14, Z15 scratch):
// c0, c1, c2, c3 = hi(M1·c2)^c1^k0, lo(M1·c2), hi(M0·c0)^c3^k1, lo(M0·c0); k += w.
#define PHILOXROUND \
	VPMULUDQ Z6, Z0, Z14; \
	VPMULUDQ Z7, Z2, Z15; \
	VPSRLQ $32, Z15, Z0; \
	VPTERNLOGQ $0x96, Z4, Z1, Z0; \
	VPANDQ Z10, Z15, Z1; \
	VPSRLQ $32, Z14, Z2; \
	VPTERNLOGQ $0x96, Z5, Z3, Z2; \
	VPANDQ Z10, Z14, Z3; \
	VPADDD Z8, Z4, Z4; \
	VPADDD Z9, Z5, Z5

// func dropKeepAVX512(bits []uint8, blk0 uint64, key0, key1 uint32, thresh uint64)
// For each pair of bytes i (len(bits) is even), the Philox blocks blk0+8i/2+j, j < 8, with
// counter (block, 0, 0) and the key: bit j of bits[2i] is set when the 53-bit integer
// w0<<21 | w1>>11 of block j's words 0, 1 is at least thresh, bit j of bits[2i+1] when
// that of its words 2, 3 is (the elements 2·block and 2·block+1 are kept).
TEXT ·dropKeepAVX512(SB), NOSPLIT, $0-48
	MOVQ bits_base+0(FP), DI
	MOVQ bits_len+8(FP), CX
	SHRQ $1, CX
	MOVQ blk0+24(FP), BX
	MOVL key0+32(FP), AX
	VPBROADCASTQ AX, Z16
	MOVL key1+36(FP), AX
	VPBROADCASTQ AX, Z17
	VPBROADCASTQ thresh+40(FP), Z12
	MOVL $0xD2511F53, AX
	VPBROADCASTQ AX, Z6
	MOVL $0xCD9E8D57, AX
	VPBROADCASTQ AX, Z7
	MOVL $0x9E3779B9, AX
	VPBROADCASTQ AX, Z8
	MOVL $0xBB67AE85, AX
	VPBROADCASTQ AX, Z9
	MOVL $0xFFFFFFFF, AX
	VPBROADCASTQ AX, Z10
	VMOVDQU64 philoxLanes<>(SB), Z11

droploop:
	TESTQ CX, CX
	JEQ   dropdone
	VPBROADCASTQ BX, Z13
	VPADDQ Z11, Z13, Z13       // the eight block numbers
	VPANDQ Z10, Z13, Z0        // c0: low word
	VPSRLQ $32, Z13, Z1        // c1: high word
	VPXORQ Z2, Z2, Z2
	VPXORQ Z3, Z3, Z3
	VMOVDQA64 Z16, Z4
	VMOVDQA64 Z17, Z5
	PHILOXROUND
	PHILOXROUND
	PHILOXROUND
	PHILOXROUND
	PHILOXROUND
	PHILOXROUND
	PHILOXROUND
	PHILOXROUND
	PHILOXROUND
	PHILOXROUND
	VPSLLQ $21, Z0, Z14
	VPSRLQ $11, Z1, Z15
	VPORQ  Z15, Z14, Z14       // even elements' 53-bit integers
	VPCMPUQ $5, Z12, Z14, K1   // ≥ thresh: kept
	VPSLLQ $21, Z2, Z14
	VPSRLQ $11, Z3, Z15
	VPORQ  Z15, Z14, Z14       // odd elements'
	VPCMPUQ $5, Z12, Z14, K2
	KMOVW K1, AX
	MOVB  AX, (DI)
	KMOVW K2, AX
	MOVB  AX, 1(DI)
	ADDQ  $8, BX
	ADDQ  $2, DI
	DECQ  CX
	JMP   droploop

dropdone:
	VZEROUPPER
	RET
