//go:build !purego

#include "textflag.h"

// AVX-512 float32 loops with float64 internals, the fast paths of vmath.go (and of the
// attention rows, cpu_attention_rows.go). expSum, expAffineSum and maxF32 take any length
// (masked tails); the others a multiple of 8 (or 16) elements,
// vmath.go doing the rest with the portable formulas. exp (EXPPD): x clamped to
// [-746, 710], n = round(x·log2 e), r = x − n·ln2 (two-part ln2, fused), e^r by its
// degree-12 Taylor polynomial (relative error below 2e-16 on |r| ≤ ln2/2), scaled by 2^n
// with VSCALEFPD (which overflows to +Inf and underflows through subnormals to 0).

DATA vmathConsts<>+0x00(SB)/8, $0x3ff71547652b82fe // log2 e
DATA vmathConsts<>+0x08(SB)/8, $0x3fe62e42fee00000 // ln2 high part
DATA vmathConsts<>+0x10(SB)/8, $0x3dea39ef35793c76 // ln2 low part
DATA vmathConsts<>+0x18(SB)/8, $0x4086300000000000 // 710
DATA vmathConsts<>+0x20(SB)/8, $0xc087500000000000 // -746
DATA vmathConsts<>+0x28(SB)/8, $0x3ff0000000000000 // 1
DATA vmathConsts<>+0x30(SB)/8, $0x3fe0000000000000 // 1/2!
DATA vmathConsts<>+0x38(SB)/8, $0x3fc5555555555555 // 1/3!
DATA vmathConsts<>+0x40(SB)/8, $0x3fa5555555555555 // 1/4!
DATA vmathConsts<>+0x48(SB)/8, $0x3f81111111111111 // 1/5!
DATA vmathConsts<>+0x50(SB)/8, $0x3f56c16c16c16c17 // 1/6!
DATA vmathConsts<>+0x58(SB)/8, $0x3f2a01a01a01a01a // 1/7!
DATA vmathConsts<>+0x60(SB)/8, $0x3efa01a01a01a01a // 1/8!
DATA vmathConsts<>+0x68(SB)/8, $0x3ec71de3a556c734 // 1/9!
DATA vmathConsts<>+0x70(SB)/8, $0x3e927e4fb7789f5c // 1/10!
DATA vmathConsts<>+0x78(SB)/8, $0x3e5ae64567f544e4 // 1/11!
DATA vmathConsts<>+0x80(SB)/8, $0x3e21eed8eff8d898 // 1/12!
DATA vmathConsts<>+0x88(SB)/8, $0x3fa6e4e26d4801f7 // 0.044715
DATA vmathConsts<>+0x90(SB)/8, $0xbff9884533d43651 // -2·√(2/π)
DATA vmathConsts<>+0x98(SB)/8, $0x3fe9884533d43651 // √(2/π)
DATA vmathConsts<>+0xa0(SB)/8, $0x3fc12ba9d1f60179 // 3·0.044715
DATA vmathConsts<>+0xa8(SB)/8, $0x4000000000000000 // 2
GLOBL vmathConsts<>(SB), RODATA|NOPTR, $0xb0

// EXPCONSTS loads exp's constants into Z15..Z31.
#define EXPCONSTS \
	VBROADCASTSD vmathConsts<>+0x00(SB), Z31; \
	VBROADCASTSD vmathConsts<>+0x08(SB), Z30; \
	VBROADCASTSD vmathConsts<>+0x10(SB), Z29; \
	VBROADCASTSD vmathConsts<>+0x18(SB), Z28; \
	VBROADCASTSD vmathConsts<>+0x20(SB), Z27; \
	VBROADCASTSD vmathConsts<>+0x28(SB), Z26; \
	VBROADCASTSD vmathConsts<>+0x30(SB), Z25; \
	VBROADCASTSD vmathConsts<>+0x38(SB), Z24; \
	VBROADCASTSD vmathConsts<>+0x40(SB), Z23; \
	VBROADCASTSD vmathConsts<>+0x48(SB), Z22; \
	VBROADCASTSD vmathConsts<>+0x50(SB), Z21; \
	VBROADCASTSD vmathConsts<>+0x58(SB), Z20; \
	VBROADCASTSD vmathConsts<>+0x60(SB), Z19; \
	VBROADCASTSD vmathConsts<>+0x68(SB), Z18; \
	VBROADCASTSD vmathConsts<>+0x70(SB), Z17; \
	VBROADCASTSD vmathConsts<>+0x78(SB), Z16; \
	VBROADCASTSD vmathConsts<>+0x80(SB), Z15

// EXPPD sets P = e^X for 8 doubles; X and N are clobbered. Needs EXPCONSTS. NaN stays NaN
// (VMINPD/VMAXPD return their second source, X, when it is NaN).
#define EXPPD(X, N, P) \
	VMINPD X, Z28, X; \
	VMAXPD X, Z27, X; \
	VMULPD Z31, X, N; \
	VRNDSCALEPD $0, N, N; \
	VFNMADD231PD Z30, N, X; \
	VFNMADD231PD Z29, N, X; \
	VMOVAPD Z15, P; \
	VFMADD213PD Z16, X, P; \
	VFMADD213PD Z17, X, P; \
	VFMADD213PD Z18, X, P; \
	VFMADD213PD Z19, X, P; \
	VFMADD213PD Z20, X, P; \
	VFMADD213PD Z21, X, P; \
	VFMADD213PD Z22, X, P; \
	VFMADD213PD Z23, X, P; \
	VFMADD213PD Z24, X, P; \
	VFMADD213PD Z25, X, P; \
	VFMADD213PD Z26, X, P; \
	VFMADD213PD Z26, X, P; \
	VSCALEFPD N, P, P

// HSUMPD adds the 8 doubles of Z into the low lane of X (Y and X: Z's halves); TY and TX
// are scratch. The order is fixed: halves, then quarters, then the last pair.
#define HSUMPD(Z, Y, X, TY, TX) \
	VEXTRACTF64X4 $1, Z, TY; \
	VADDPD TY, Y, Y; \
	VEXTRACTF128 $1, Y, TX; \
	VADDPD TX, X, X; \
	VPERMILPD $1, X, TX; \
	VADDSD TX, X, X

// HMAXPS puts the largest of the 16 floats of Z into the low lane of X (Y and X: Z's
// halves); TY and TX are scratch.
#define HMAXPS(Z, Y, X, TY, TX) \
	VEXTRACTF64X4 $1, Z, TY; \
	VMAXPS TY, Y, Y; \
	VEXTRACTF128 $1, Y, TX; \
	VMAXPS TX, X, X; \
	VPERMILPS $0x4e, X, TX; \
	VMAXPS TX, X, X; \
	VPERMILPS $0xb1, X, TX; \
	VMAXPS TX, X, X

// func expSumF32AVX512(src []float32, scale, shift float64) float64
// Returns Σ e^(scale·x+shift) over src, summed in two 8-lane float64 accumulators (the
// tail masked into the first) that are then added in a fixed order.
TEXT ·expSumF32AVX512(SB), NOSPLIT, $0-48
	EXPCONSTS
	MOVQ src_base+0(FP), SI
	MOVQ src_len+8(FP), CX
	VBROADCASTSD scale+24(FP), Z14
	VBROADCASTSD shift+32(FP), Z13
	VPXORQ Z12, Z12, Z12
	VPXORQ Z11, Z11, Z11

expsum16:
	CMPQ CX, $16
	JLT  expsum8
	VCVTPS2PD (SI), Z0
	VCVTPS2PD 32(SI), Z3
	VFMADD213PD Z13, Z14, Z0
	VFMADD213PD Z13, Z14, Z3
	EXPPD(Z0, Z1, Z2)
	EXPPD(Z3, Z4, Z5)
	VADDPD Z2, Z12, Z12
	VADDPD Z5, Z11, Z11
	ADDQ $64, SI
	SUBQ $16, CX
	JMP  expsum16

expsum8:
	TESTQ CX, CX
	JEQ   expsumdone
	MOVQ  $1, AX                 // lanes min(CX, 8)
	CMPQ  CX, $8
	JGE   expsumall
	SHLQ  CX, AX
	JMP   expsummask
expsumall:
	MOVQ  $256, AX
expsummask:
	DECQ  AX
	KMOVB AX, K1
	VCVTPS2PD.Z (SI), K1, Z0
	VFMADD213PD Z13, Z14, Z0
	EXPPD(Z0, Z1, Z2)
	VADDPD Z2, Z12, K1, Z12
	ADDQ $32, SI
	SUBQ $8, CX
	JGT  expsum8

expsumdone:
	VADDPD Z11, Z12, Z12
	HSUMPD(Z12, Y12, X12, Y1, X1)
	VMOVSD X12, ret+40(FP)
	VZEROUPPER
	RET

// func expAffineSumF32AVX512(dst, src []float32, alpha, scale, shift, beta float64) float64
// Sets dst[i] = float32(alpha·e^(scale·src[i]+shift) + beta) for i < len(dst) (any length)
// and returns the float64 sum of the exponentials e^(scale·src[i]+shift), in expSum's
// accumulators and order.
TEXT ·expAffineSumF32AVX512(SB), NOSPLIT, $0-88
	EXPCONSTS
	MOVQ dst_base+0(FP), DI
	MOVQ dst_len+8(FP), CX
	MOVQ src_base+24(FP), SI
	VBROADCASTSD alpha+48(FP), Z14
	VBROADCASTSD scale+56(FP), Z13
	VBROADCASTSD shift+64(FP), Z12
	VBROADCASTSD beta+72(FP), Z11
	VPXORQ Z10, Z10, Z10
	VPXORQ Z9, Z9, Z9

expaff16:
	CMPQ CX, $16
	JLT  expaff8
	VCVTPS2PD (SI), Z0
	VCVTPS2PD 32(SI), Z3
	VFMADD213PD Z12, Z13, Z0
	VFMADD213PD Z12, Z13, Z3
	EXPPD(Z0, Z1, Z2)
	EXPPD(Z3, Z4, Z5)
	VADDPD Z2, Z10, Z10
	VADDPD Z5, Z9, Z9
	VFMADD213PD Z11, Z14, Z2
	VFMADD213PD Z11, Z14, Z5
	VCVTPD2PS Z2, Y6
	VCVTPD2PS Z5, Y7
	VMOVUPS Y6, (DI)
	VMOVUPS Y7, 32(DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  expaff16

expaff8:
	TESTQ CX, CX
	JEQ   expaffdone
	MOVQ  $1, AX                 // lanes min(CX, 8)
	CMPQ  CX, $8
	JGE   expaffall
	SHLQ  CX, AX
	JMP   expaffmask
expaffall:
	MOVQ  $256, AX
expaffmask:
	DECQ  AX
	KMOVB AX, K1
	VCVTPS2PD.Z (SI), K1, Z0
	VFMADD213PD Z12, Z13, Z0
	EXPPD(Z0, Z1, Z2)
	VADDPD Z2, Z10, K1, Z10
	VFMADD213PD Z11, Z14, Z2
	VCVTPD2PS Z2, Y3
	VMOVUPS Y3, K1, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JGT  expaff8

expaffdone:
	VADDPD Z9, Z10, Z10
	HSUMPD(Z10, Y10, X10, Y1, X1)
	VMOVSD X10, ret+80(FP)
	VZEROUPPER
	RET

// GELUCONSTS loads GELUFWD's constants: Z14 = 0.044715, Z13 = −2√(2/π).
#define GELUCONSTS \
	VBROADCASTSD vmathConsts<>+0x88(SB), Z14; \
	VBROADCASTSD vmathConsts<>+0x90(SB), Z13

// GELUBWDCONSTS loads GELUBWD's constants: GELUCONSTS's, Z12 = √(2/π),
// Z11 = 3·0.044715, Z10 = 2.
#define GELUBWDCONSTS \
	GELUCONSTS; \
	VBROADCASTSD vmathConsts<>+0x98(SB), Z12; \
	VBROADCASTSD vmathConsts<>+0xa0(SB), Z11; \
	VBROADCASTSD vmathConsts<>+0xa8(SB), Z10

// GELUFWD sets Z5 to the tanh GeLU x/(1+e^(−2u)) of x in Z0 (Z13, Z14 hold −2√(2/π)
// and 0.044715; clobbers Z1-Z4).
#define GELUFWD \
	VMULPD Z0, Z0, Z1; \
	VFMADD213PD Z26, Z14, Z1; \
	VMULPD Z0, Z1, Z1; \
	VMULPD Z13, Z1, Z2; \
	EXPPD(Z2, Z3, Z4); \
	VADDPD Z26, Z4, Z4; \
	VDIVPD Z4, Z0, Z5

// GELUBWD sets Z6 to dy·GeLU'(x) for x in Z0 and dy the 8 float32 at (DX):
// u = √(2/π)(x+0.044715x³), s = 1/(1+e^(−2u)), u' = √(2/π)(1+3·0.044715x²),
// GeLU' = 2x(s−s²)u' + s (Z10-Z14 hold 2, 3·0.044715, √(2/π), −2√(2/π), 0.044715;
// clobbers Z1-Z8).
#define GELUBWD \
	VMULPD Z0, Z0, Z1; \
	VMOVAPD Z1, Z7; \
	VFMADD213PD Z26, Z14, Z1; \
	VFMADD213PD Z26, Z11, Z7; \
	VMULPD Z12, Z7, Z7; \
	VMULPD Z0, Z1, Z1; \
	VMULPD Z13, Z1, Z2; \
	EXPPD(Z2, Z3, Z4); \
	VADDPD Z26, Z4, Z4; \
	VDIVPD Z4, Z26, Z5; \
	VMULPD Z5, Z5, Z6; \
	VSUBPD Z6, Z5, Z6; \
	VMULPD Z0, Z6, Z6; \
	VMULPD Z7, Z6, Z6; \
	VFMADD213PD Z5, Z10, Z6; \
	VCVTPS2PD (DX), Z8; \
	VMULPD Z8, Z6, Z6

// func geluTanhF32AVX512(dst, src []float32)
// Sets dst[i] = float32(x/(1+e^(−2u))) with x = src[i], u = √(2/π)(x+0.044715x³): the
// tanh GeLU 0.5x(1+tanh u) without its cancellation. len(dst) is a multiple of 8.
TEXT ·geluTanhF32AVX512(SB), NOSPLIT, $0-48
	EXPCONSTS
	MOVQ dst_base+0(FP), DI
	MOVQ dst_len+8(FP), CX
	MOVQ src_base+24(FP), SI
	GELUCONSTS
	SHRQ $3, CX
	JEQ  geludone

geluloop:
	VCVTPS2PD (SI), Z0           // x
	GELUFWD
	VCVTPD2PS Z5, Y6
	VMOVUPS Y6, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNE  geluloop

geludone:
	VZEROUPPER
	RET

// func geluTanhBackwardF32AVX512(dx, x, dy []float32)
// Sets dx[i] = float32(dy·(s + 2x·(s−s²)·√(2/π)(1+3·0.044715x²))) with s = 1/(1+e^(−2u)),
// the derivative of the tanh GeLU. len(dx) is a multiple of 8.
TEXT ·geluTanhBackwardF32AVX512(SB), NOSPLIT, $0-72
	EXPCONSTS
	MOVQ dx_base+0(FP), DI
	MOVQ dx_len+8(FP), CX
	MOVQ x_base+24(FP), SI
	MOVQ dy_base+48(FP), DX
	GELUBWDCONSTS
	SHRQ $3, CX
	JEQ  gelubdone

gelubloop:
	VCVTPS2PD (SI), Z0           // x
	GELUBWD
	VCVTPD2PS Z6, Y9
	VMOVUPS Y9, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNE  gelubloop

gelubdone:
	VZEROUPPER
	RET

// func maxSumF32AVX512(src []float32) (mx float32, sum float64)
// Returns the largest element (not NaN-aware: callers check sum for NaN) and the float64
// sum of src (len a multiple of 16), in two 8-lane accumulators added in a fixed order.
TEXT ·maxSumF32AVX512(SB), NOSPLIT, $0-40
	MOVQ src_base+0(FP), SI
	MOVQ src_len+8(FP), CX
	MOVL $0xff800000, AX         // −Inf
	VPBROADCASTD AX, Z0
	VPXORQ Z1, Z1, Z1
	VPXORQ Z2, Z2, Z2
	SHRQ $4, CX
	JEQ  maxsumdone

maxsumloop:
	VMOVUPS (SI), Z3
	VMAXPS Z3, Z0, Z0
	VCVTPS2PD (SI), Z4
	VCVTPS2PD 32(SI), Z5
	VADDPD Z4, Z1, Z1
	VADDPD Z5, Z2, Z2
	ADDQ $64, SI
	DECQ CX
	JNE  maxsumloop

maxsumdone:
	HMAXPS(Z0, Y0, X0, Y3, X3)
	VMOVSS X0, mx+24(FP)
	VADDPD Z2, Z1, Z1
	HSUMPD(Z1, Y1, X1, Y3, X3)
	VMOVSD X1, sum+32(FP)
	VZEROUPPER
	RET

// func sqDevSumF32AVX512(x []float32, mu float64) float64
// Returns Σ (x−mu)² in float64 over x (len a multiple of 8), in two 8-lane accumulators
// added in a fixed order.
TEXT ·sqDevSumF32AVX512(SB), NOSPLIT, $0-40
	MOVQ x_base+0(FP), SI
	MOVQ x_len+8(FP), CX
	VBROADCASTSD mu+24(FP), Z14
	VPXORQ Z12, Z12, Z12
	VPXORQ Z11, Z11, Z11
	SHRQ $3, CX
	JEQ  sqdevdone

sqdevloop:
	CMPQ CX, $2
	JLT  sqdevone
	VCVTPS2PD (SI), Z0
	VCVTPS2PD 32(SI), Z1
	VSUBPD Z14, Z0, Z0
	VSUBPD Z14, Z1, Z1
	VFMADD231PD Z0, Z0, Z12
	VFMADD231PD Z1, Z1, Z11
	ADDQ $64, SI
	SUBQ $2, CX
	JMP  sqdevloop

sqdevone:
	TESTQ CX, CX
	JEQ   sqdevdone
	VCVTPS2PD (SI), Z0
	VSUBPD Z14, Z0, Z0
	VFMADD231PD Z0, Z0, Z12

sqdevdone:
	VADDPD Z11, Z12, Z12
	HSUMPD(Z12, Y12, X12, Y1, X1)
	VMOVSD X12, ret+32(FP)
	VZEROUPPER
	RET

// func normRowF32AVX512(y, x, w, b []float32, mu, rs float64)
// Sets y[i] = float32(((x[i]−mu)·rs)·w[i] + b[i]) for len(y), a multiple of 8.
TEXT ·normRowF32AVX512(SB), NOSPLIT, $0-112
	MOVQ y_base+0(FP), DI
	MOVQ y_len+8(FP), CX
	MOVQ x_base+24(FP), SI
	MOVQ w_base+48(FP), R8
	MOVQ b_base+72(FP), R9
	VBROADCASTSD mu+96(FP), Z14
	VBROADCASTSD rs+104(FP), Z13
	SHRQ $3, CX
	JEQ  normrowdone

normrowloop:
	VCVTPS2PD (SI), Z0
	VCVTPS2PD (R8), Z1
	VCVTPS2PD (R9), Z2
	VSUBPD Z14, Z0, Z0
	VMULPD Z13, Z0, Z0
	VFMADD213PD Z2, Z1, Z0
	VCVTPD2PS Z0, Y3
	VMOVUPS Y3, (DI)
	ADDQ $32, SI
	ADDQ $32, R8
	ADDQ $32, R9
	ADDQ $32, DI
	DECQ CX
	JNE  normrowloop

normrowdone:
	VZEROUPPER
	RET

// func normBwdSumsF32AVX512(dy, x, w []float32, mu, rs float64) (sg, sgx float64)
// Returns Σ g and Σ g·xhat with g = dy·w, xhat = (x−mu)·rs, over len(dy), a multiple of 8.
TEXT ·normBwdSumsF32AVX512(SB), NOSPLIT, $0-104
	MOVQ dy_base+0(FP), DX
	MOVQ dy_len+8(FP), CX
	MOVQ x_base+24(FP), SI
	MOVQ w_base+48(FP), R8
	VBROADCASTSD mu+72(FP), Z14
	VBROADCASTSD rs+80(FP), Z13
	VPXORQ Z12, Z12, Z12
	VPXORQ Z11, Z11, Z11
	SHRQ $3, CX
	JEQ  nbsumdone

nbsumloop:
	VCVTPS2PD (DX), Z0
	VCVTPS2PD (R8), Z1
	VCVTPS2PD (SI), Z2
	VMULPD Z1, Z0, Z0            // g
	VSUBPD Z14, Z2, Z2
	VMULPD Z13, Z2, Z2           // xhat
	VADDPD Z0, Z12, Z12
	VFMADD231PD Z2, Z0, Z11
	ADDQ $32, DX
	ADDQ $32, R8
	ADDQ $32, SI
	DECQ CX
	JNE  nbsumloop

nbsumdone:
	HSUMPD(Z12, Y12, X12, Y1, X1)
	VMOVSD X12, sg+88(FP)
	HSUMPD(Z11, Y11, X11, Y1, X1)
	VMOVSD X11, sgx+96(FP)
	VZEROUPPER
	RET

// func normBwdRowF32AVX512(dx, dy, x, w []float32, mu, rs, sg, sgx float64)
// Sets dx[i] = float32(rs·(g − sg − xhat·sgx)) with g = dy·w, xhat = (x−mu)·rs, for
// len(dx), a multiple of 8.
TEXT ·normBwdRowF32AVX512(SB), NOSPLIT, $0-128
	MOVQ dx_base+0(FP), DI
	MOVQ dx_len+8(FP), CX
	MOVQ dy_base+24(FP), DX
	MOVQ x_base+48(FP), SI
	MOVQ w_base+72(FP), R8
	VBROADCASTSD mu+96(FP), Z14
	VBROADCASTSD rs+104(FP), Z13
	VBROADCASTSD sg+112(FP), Z12
	VBROADCASTSD sgx+120(FP), Z11
	SHRQ $3, CX
	JEQ  nbrowdone

nbrowloop:
	VCVTPS2PD (DX), Z0
	VCVTPS2PD (R8), Z1
	VCVTPS2PD (SI), Z2
	VMULPD Z1, Z0, Z0            // g
	VSUBPD Z14, Z2, Z2
	VMULPD Z13, Z2, Z2           // xhat
	VSUBPD Z12, Z0, Z0           // g − sg
	VFNMADD231PD Z11, Z2, Z0     // g − sg − xhat·sgx
	VMULPD Z13, Z0, Z0
	VCVTPD2PS Z0, Y3
	VMOVUPS Y3, (DI)
	ADDQ $32, DX
	ADDQ $32, R8
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNE  nbrowloop

nbrowdone:
	VZEROUPPER
	RET

// func normBwdColsF32AVX512(sw, sb []float64, dy, x []float32, mu, rs float64)
// Adds dy·xhat into sw and dy into sb elementwise (xhat = (x−mu)·rs), for len(sw), a
// multiple of 8.
TEXT ·normBwdColsF32AVX512(SB), NOSPLIT, $0-112
	MOVQ sw_base+0(FP), DI
	MOVQ sw_len+8(FP), CX
	MOVQ sb_base+24(FP), BX
	MOVQ dy_base+48(FP), DX
	MOVQ x_base+72(FP), SI
	VBROADCASTSD mu+96(FP), Z14
	VBROADCASTSD rs+104(FP), Z13
	SHRQ $3, CX
	JEQ  nbcoldone

nbcolloop:
	VCVTPS2PD (DX), Z0
	VCVTPS2PD (SI), Z2
	VSUBPD Z14, Z2, Z2
	VMULPD Z13, Z2, Z2           // xhat
	VMOVUPD (DI), Z3
	VFMADD231PD Z2, Z0, Z3
	VMOVUPD Z3, (DI)
	VADDPD (BX), Z0, Z4
	VMOVUPD Z4, (BX)
	ADDQ $32, DX
	ADDQ $32, SI
	ADDQ $64, DI
	ADDQ $64, BX
	DECQ CX
	JNE  nbcolloop

nbcoldone:
	VZEROUPPER
	RET

// func dotF32AVX512(a, b []float32) float64
// Returns Σ a[i]·b[i] in float64 over len(a), a multiple of 8, in two 8-lane
// accumulators added in a fixed order.
TEXT ·dotF32AVX512(SB), NOSPLIT, $0-56
	MOVQ a_base+0(FP), SI
	MOVQ a_len+8(FP), CX
	MOVQ b_base+24(FP), DX
	VPXORQ Z12, Z12, Z12
	VPXORQ Z11, Z11, Z11
	SHRQ $3, CX
	JEQ  dotdone

dotloop:
	CMPQ CX, $2
	JLT  dotone
	VCVTPS2PD (SI), Z0
	VCVTPS2PD 32(SI), Z1
	VCVTPS2PD (DX), Z2
	VCVTPS2PD 32(DX), Z3
	VFMADD231PD Z2, Z0, Z12
	VFMADD231PD Z3, Z1, Z11
	ADDQ $64, SI
	ADDQ $64, DX
	SUBQ $2, CX
	JMP  dotloop

dotone:
	TESTQ CX, CX
	JEQ   dotdone
	VCVTPS2PD (SI), Z0
	VCVTPS2PD (DX), Z2
	VFMADD231PD Z2, Z0, Z12

dotdone:
	VADDPD Z11, Z12, Z12
	HSUMPD(Z12, Y12, X12, Y1, X1)
	VMOVSD X12, ret+48(FP)
	VZEROUPPER
	RET

// func softmaxBwdRowF32AVX512(dx, y, dy []float32, scale, s float64)
// Sets dx[i] = float32((scale·y[i])·(dy[i]−s)) for len(dx), a multiple of 8.
TEXT ·softmaxBwdRowF32AVX512(SB), NOSPLIT, $0-88
	MOVQ dx_base+0(FP), DI
	MOVQ dx_len+8(FP), CX
	MOVQ y_base+24(FP), SI
	MOVQ dy_base+48(FP), DX
	VBROADCASTSD scale+72(FP), Z14
	VBROADCASTSD s+80(FP), Z13
	SHRQ $3, CX
	JEQ  smbdone

smbloop:
	VCVTPS2PD (SI), Z0
	VCVTPS2PD (DX), Z1
	VMULPD Z14, Z0, Z0
	VSUBPD Z13, Z1, Z1
	VMULPD Z1, Z0, Z0
	VCVTPD2PS Z0, Y2
	VMOVUPS Y2, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNE  smbloop

smbdone:
	VZEROUPPER
	RET

// BINLOOP is the loop of binaryF32AVX512 for one operation OP, with b loaded by LOADB
// (VMOVUPS: streamed, DX advancing by R9 = 64; VBROADCASTSS: one element, R9 = 0).
#define BINLOOP(OP, LOADB, name) \
name: \
	VMOVUPS (SI), Z0; \
	LOADB (DX), Z1; \
	OP Z1, Z0, Z0; \
	VMOVUPS Z0, (DI); \
	ADDQ $64, SI; \
	ADDQ R9, DX; \
	ADDQ $64, DI; \
	DECQ CX; \
	JNE name; \
	JMP bindone

// func binaryF32AVX512(op int, d, a, b []float32, bStride int)
// Sets d[i] = a[i] op b[i·bStride] (op: 1 +, 2 −, 3 ×, 4 ÷; bStride 0 or 1) for len(d),
// a multiple of 16: exactly rounded float32 arithmetic, as in Go.
TEXT ·binaryF32AVX512(SB), NOSPLIT, $0-88
	MOVQ op+0(FP), AX
	MOVQ d_base+8(FP), DI
	MOVQ d_len+16(FP), CX
	MOVQ a_base+32(FP), SI
	MOVQ b_base+56(FP), DX
	MOVQ bStride+80(FP), R9
	SHLQ $6, R9
	SHRQ $4, CX
	JEQ  bindone
	TESTQ R9, R9
	JEQ  binbcast
	CMPQ AX, $1
	JEQ  binadd
	CMPQ AX, $2
	JEQ  binsub
	CMPQ AX, $3
	JEQ  binmul
	JMP  bindiv

binbcast:
	CMPQ AX, $1
	JEQ  binaddb
	CMPQ AX, $2
	JEQ  binsubb
	CMPQ AX, $3
	JEQ  binmulb
	JMP  bindivb

BINLOOP(VADDPS, VMOVUPS, binadd)
BINLOOP(VSUBPS, VMOVUPS, binsub)
BINLOOP(VMULPS, VMOVUPS, binmul)
BINLOOP(VDIVPS, VMOVUPS, bindiv)
BINLOOP(VADDPS, VBROADCASTSS, binaddb)
BINLOOP(VSUBPS, VBROADCASTSS, binsubb)
BINLOOP(VMULPS, VBROADCASTSS, binmulb)
BINLOOP(VDIVPS, VBROADCASTSS, bindivb)

bindone:
	VZEROUPPER
	RET

// func maxF32AVX512(src []float32) float32
// Returns the largest element of src (any length; −Inf for none), in two 16-lane
// accumulators (the tail masked into the first). Not NaN-aware.
TEXT ·maxF32AVX512(SB), NOSPLIT, $0-28
	MOVQ src_base+0(FP), SI
	MOVQ src_len+8(FP), CX
	MOVL $0xff800000, AX         // −Inf
	VPBROADCASTD AX, Z0
	VMOVAPS Z0, Z1

max32:
	CMPQ CX, $32
	JLT  max16
	VMAXPS (SI), Z0, Z0
	VMAXPS 64(SI), Z1, Z1
	ADDQ $128, SI
	SUBQ $32, CX
	JMP  max32

max16:
	TESTQ CX, CX
	JEQ   maxdone
	MOVQ  $1, AX                 // lanes min(CX, 16)
	CMPQ  CX, $16
	JGE   maxall
	SHLQ  CX, AX
	JMP   maxmask
maxall:
	MOVQ  $0x10000, AX
maxmask:
	DECQ  AX
	KMOVW AX, K1
	VMAXPS (SI), Z0, K1, Z0
	ADDQ $64, SI
	SUBQ $16, CX
	JGT  max16

maxdone:
	VMAXPS Z1, Z0, Z0
	HMAXPS(Z0, Y0, X0, Y3, X3)
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func addColsF32AVX512(acc []float64, row []float32)
// Adds row into acc elementwise in float64, for len(acc), a multiple of 8.
TEXT ·addColsF32AVX512(SB), NOSPLIT, $0-48
	MOVQ acc_base+0(FP), DI
	MOVQ acc_len+8(FP), CX
	MOVQ row_base+24(FP), SI
	SHRQ $3, CX
	JEQ  acdone

acloop:
	VCVTPS2PD (SI), Z0
	VADDPD    (DI), Z0, Z0
	VMOVUPD   Z0, (DI)
	ADDQ $32, SI
	ADDQ $64, DI
	DECQ CX
	JNE  acloop

acdone:
	VZEROUPPER
	RET

// func geluTanhBiasF32AVX512(dst, src, bias []float32)
// geluTanhF32AVX512 of x = float32(src[i]+bias[i]) (the sum rounded to float32, as
// binaryF32AVX512 adds), for len(dst) a multiple of 8.
TEXT ·geluTanhBiasF32AVX512(SB), NOSPLIT, $0-72
	EXPCONSTS
	MOVQ dst_base+0(FP), DI
	MOVQ dst_len+8(FP), CX
	MOVQ src_base+24(FP), SI
	MOVQ bias_base+48(FP), BX
	GELUCONSTS
	SHRQ $3, CX
	JEQ  gelubiasdone

gelubiasloop:
	VMOVUPS (SI), Y0
	VADDPS  (BX), Y0, Y0         // x + bias in float32
	VCVTPS2PD Y0, Z0             // x
	GELUFWD
	VCVTPD2PS Z5, Y6
	VMOVUPS Y6, (DI)
	ADDQ $32, SI
	ADDQ $32, BX
	ADDQ $32, DI
	DECQ CX
	JNE  gelubiasloop

gelubiasdone:
	VZEROUPPER
	RET

// func geluTanhBiasBackwardF32AVX512(dx, x, bias, dy []float32)
// geluTanhBackwardF32AVX512 at float32(x[i]+bias[i]), for len(dx) a multiple of 8.
TEXT ·geluTanhBiasBackwardF32AVX512(SB), NOSPLIT, $0-96
	EXPCONSTS
	MOVQ dx_base+0(FP), DI
	MOVQ dx_len+8(FP), CX
	MOVQ x_base+24(FP), SI
	MOVQ bias_base+48(FP), BX
	MOVQ dy_base+72(FP), DX
	GELUBWDCONSTS
	SHRQ $3, CX
	JEQ  gelubbiasdone

gelubbiasloop:
	VMOVUPS (SI), Y0
	VADDPS  (BX), Y0, Y0         // x + bias in float32
	VCVTPS2PD Y0, Z0             // x
	GELUBWD
	VCVTPD2PS Z6, Y9
	VMOVUPS Y9, (DI)
	ADDQ $32, SI
	ADDQ $32, BX
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNE  gelubbiasloop

gelubbiasdone:
	VZEROUPPER
	RET
