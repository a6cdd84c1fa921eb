//go:build !purego

#include "textflag.h"

// AVX-512 float32 loops of the cross-entropy kernels (vmath_ce.go), 16 lanes, any length
// (the tail masked). expf (EXPPS): d clamped to [-110, 100], n = round(d·log2 e),
// r = d − n·ln2 (Cody-Waite two-part ln2, fused), e^r by a degree-6 minimax polynomial
// with c0 = c1 = 1 (relative error 2e-9 on |r| ≤ ln2/2 with exact coefficients; in
// float32 Horner form within one ulp of the correctly rounded e^d), scaled by 2^n with
// VSCALEFPS (overflow to +Inf, underflow through subnormals to 0). NaN stays NaN. The
// coefficients c2..c6 were fitted to minimise the maximum relative error on
// [−ln2/2, ln2/2] (iteratively reweighted least squares on Chebyshev nodes).

DATA ceConsts<>+0x00(SB)/4, $0x3fb8aa3b // log2 e
DATA ceConsts<>+0x04(SB)/4, $0x3f318000 // ln2 high part (9 bits: n·ln2hi is exact)
DATA ceConsts<>+0x08(SB)/4, $0xb95e8083 // ln2 low part
DATA ceConsts<>+0x0c(SB)/4, $0x42c80000 // 100
DATA ceConsts<>+0x10(SB)/4, $0xc2dc0000 // -110
DATA ceConsts<>+0x14(SB)/4, $0x3f800000 // 1 (c0 and c1)
DATA ceConsts<>+0x18(SB)/4, $0x3efffffd // c2
DATA ceConsts<>+0x1c(SB)/4, $0x3e2aaa05 // c3
DATA ceConsts<>+0x20(SB)/4, $0x3d2aac4d // c4
DATA ceConsts<>+0x24(SB)/4, $0x3c093686 // c5
DATA ceConsts<>+0x28(SB)/4, $0x3ab55cc0 // c6
GLOBL ceConsts<>(SB), RODATA|NOPTR, $0x2c

// EXPCONSTS32 loads expf's constants into Z20..Z24 and Z26..Z31.
#define EXPCONSTS32 \
	VBROADCASTSS ceConsts<>+0x00(SB), Z31; \
	VBROADCASTSS ceConsts<>+0x04(SB), Z30; \
	VBROADCASTSS ceConsts<>+0x08(SB), Z29; \
	VBROADCASTSS ceConsts<>+0x0c(SB), Z28; \
	VBROADCASTSS ceConsts<>+0x10(SB), Z27; \
	VBROADCASTSS ceConsts<>+0x14(SB), Z26; \
	VBROADCASTSS ceConsts<>+0x18(SB), Z24; \
	VBROADCASTSS ceConsts<>+0x1c(SB), Z23; \
	VBROADCASTSS ceConsts<>+0x20(SB), Z22; \
	VBROADCASTSS ceConsts<>+0x24(SB), Z21; \
	VBROADCASTSS ceConsts<>+0x28(SB), Z20

// EXPPS sets P = e^X for 16 floats; X and N are clobbered. Needs EXPCONSTS32. VMINPS and
// VMAXPS return their second source, X, when it is NaN.
#define EXPPS(X, N, P) \
	VMINPS X, Z28, X; \
	VMAXPS X, Z27, X; \
	VMULPS Z31, X, N; \
	VRNDSCALEPS $0, N, N; \
	VFNMADD231PS Z30, N, X; \
	VFNMADD231PS Z29, N, X; \
	VMOVAPS Z20, P; \
	VFMADD213PS Z21, X, P; \
	VFMADD213PS Z22, X, P; \
	VFMADD213PS Z23, X, P; \
	VFMADD213PS Z24, X, P; \
	VFMADD213PS Z26, X, P; \
	VFMADD213PS Z26, X, P; \
	VSCALEFPS N, P, P

// EXPPS2 is EXPPS on two independent vectors, interleaved.
#define EXPPS2(XA, NA, PA, XB, NB, PB) \
	VMINPS XA, Z28, XA; \
	VMINPS XB, Z28, XB; \
	VMAXPS XA, Z27, XA; \
	VMAXPS XB, Z27, XB; \
	VMULPS Z31, XA, NA; \
	VMULPS Z31, XB, NB; \
	VRNDSCALEPS $0, NA, NA; \
	VRNDSCALEPS $0, NB, NB; \
	VFNMADD231PS Z30, NA, XA; \
	VFNMADD231PS Z30, NB, XB; \
	VFNMADD231PS Z29, NA, XA; \
	VFNMADD231PS Z29, NB, XB; \
	VMOVAPS Z20, PA; \
	VMOVAPS Z20, PB; \
	VFMADD213PS Z21, XA, PA; \
	VFMADD213PS Z21, XB, PB; \
	VFMADD213PS Z22, XA, PA; \
	VFMADD213PS Z22, XB, PB; \
	VFMADD213PS Z23, XA, PA; \
	VFMADD213PS Z23, XB, PB; \
	VFMADD213PS Z24, XA, PA; \
	VFMADD213PS Z24, XB, PB; \
	VFMADD213PS Z26, XA, PA; \
	VFMADD213PS Z26, XB, PB; \
	VFMADD213PS Z26, XA, PA; \
	VFMADD213PS Z26, XB, PB; \
	VSCALEFPS NA, PA, PA; \
	VSCALEFPS NB, PB, PB

// ADDWIDE adds the 16 floats of P, widened to float64, into Z12 (lanes 0-7) and Z11
// (lanes 8-15); Z9 and Z10 are scratch.
#define ADDWIDE(P, PY) \
	VCVTPS2PD PY, Z10; \
	VEXTRACTF64X4 $1, P, Y9; \
	VCVTPS2PD Y9, Z9; \
	VADDPD Z10, Z12, Z12; \
	VADDPD Z9, Z11, Z11

// func expShiftSumF32AVX512(x []float32, m float32) float64
// Returns Σ e^d over x with d = x[i] − m rounded to float32, e^d by EXPPS, the terms
// widened to float64 and summed lane-wise in two 8-lane accumulators that are then added
// in a fixed order (halves, quarters, the last pair). In the 32-element loop the terms of
// x[i] and x[i+16] are first added in float32 (one more rounding of 2⁻²⁴ relative).
TEXT ·expShiftSumF32AVX512(SB), NOSPLIT, $0-40
	EXPCONSTS32
	MOVQ x_base+0(FP), SI
	MOVQ x_len+8(FP), CX
	VBROADCASTSS m+24(FP), Z14
	VPXORQ Z12, Z12, Z12
	VPXORQ Z11, Z11, Z11
	MOVQ CX, R8
	SHLQ $2, R8                  // prefetch distance: len(x) floats ahead

esumloop32:
	CMPQ CX, $32
	JLT  esumloop
	PREFETCHT0 (SI)(R8*1)
	PREFETCHT0 64(SI)(R8*1)
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z3
	VSUBPS Z14, Z0, Z0
	VSUBPS Z14, Z3, Z3
	EXPPS2(Z0, Z1, Z2, Z3, Z4, Z5)
	VADDPS Z5, Z2, Z2
	ADDWIDE(Z2, Y2)
	ADDQ $128, SI
	SUBQ $32, CX
	JMP  esumloop32

esumloop:
	CMPQ CX, $16
	JLT  esumtail
	VMOVUPS (SI), Z0
	VSUBPS Z14, Z0, Z0
	EXPPS(Z0, Z1, Z2)
	ADDWIDE(Z2, Y2)
	ADDQ $64, SI
	SUBQ $16, CX
	JMP  esumloop

esumtail:
	TESTQ CX, CX
	JEQ   esumdone
	MOVQ  $1, AX
	SHLQ  CX, AX
	DECQ  AX
	KMOVW AX, K1
	VMOVUPS.Z (SI), K1, Z0
	VSUBPS Z14, Z0, Z0
	EXPPS(Z0, Z1, Z2)
	VMOVAPS.Z Z2, K1, Z2
	ADDWIDE(Z2, Y2)

esumdone:
	VADDPD Z11, Z12, Z12
	VEXTRACTF64X4 $1, Z12, Y1
	VADDPD Y1, Y12, Y12
	VEXTRACTF128 $1, Y12, X1
	VADDPD X1, X12, X12
	VPERMILPD $1, X12, X1
	VADDSD X1, X12, X12
	VMOVSD X12, ret+32(FP)
	VZEROUPPER
	RET

// func expShiftAffineF32AVX512(dst, x []float32, m, a, b float32)
// Sets dst[i] = a·e^d + b (one fused multiply-add) with d = x[i] − m rounded to float32
// and e^d by EXPPS, for i < len(dst).
TEXT ·expShiftAffineF32AVX512(SB), NOSPLIT, $0-60
	EXPCONSTS32
	MOVQ dst_base+0(FP), DI
	MOVQ dst_len+8(FP), CX
	MOVQ x_base+24(FP), SI
	VBROADCASTSS m+48(FP), Z14
	VBROADCASTSS a+52(FP), Z13
	VBROADCASTSS b+56(FP), Z12

eaffloop32:
	CMPQ CX, $32
	JLT  eaffloop
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z3
	VSUBPS Z14, Z0, Z0
	VSUBPS Z14, Z3, Z3
	EXPPS2(Z0, Z1, Z2, Z3, Z4, Z5)
	VFMADD213PS Z12, Z13, Z2
	VFMADD213PS Z12, Z13, Z5
	VMOVUPS Z2, (DI)
	VMOVUPS Z5, 64(DI)
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JMP  eaffloop32

eaffloop:
	CMPQ CX, $16
	JLT  eafftail
	VMOVUPS (SI), Z0
	VSUBPS Z14, Z0, Z0
	EXPPS(Z0, Z1, Z2)
	VFMADD213PS Z12, Z13, Z2
	VMOVUPS Z2, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  eaffloop

eafftail:
	TESTQ CX, CX
	JEQ   eaffdone
	MOVQ  $1, AX
	SHLQ  CX, AX
	DECQ  AX
	KMOVW AX, K1
	VMOVUPS.Z (SI), K1, Z0
	VSUBPS Z14, Z0, Z0
	EXPPS(Z0, Z1, Z2)
	VFMADD213PS Z12, Z13, Z2
	VMOVUPS Z2, K1, (DI)

eaffdone:
	VZEROUPPER
	RET
