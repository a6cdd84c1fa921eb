//go:build !purego

#include "textflag.h"

// func adamF32AVX512(ps, gs, ms, vs []float32, k *adamConsts[float32])
//
// adamKernel for float32, 16 lanes at a time over the first len(ps) &^ 15 elements (the
// caller does the rest), with the same operations in the same order, each rounded to
// float32 (multiplies and adds kept apart, no FMA; VSQRTPS is the correctly rounded
// float32 square root, as float32(math.Sqrt(float64(v))) is), so the results are bit for
// bit the portable kernel's.
//
// k holds, in order: scale, l2, decay, b1, c1, b2, c2, stepSize, invBC2Sqrt, eps.
TEXT ·adamF32AVX512(SB), NOSPLIT, $0-104
	MOVQ ps_base+0(FP), DI
	MOVQ ps_len+8(FP), CX
	MOVQ gs_base+24(FP), SI
	MOVQ ms_base+48(FP), R8
	MOVQ vs_base+72(FP), R9
	MOVQ k+96(FP), AX
	VBROADCASTSS 0(AX), Z16  // scale
	VBROADCASTSS 4(AX), Z17  // l2
	VBROADCASTSS 8(AX), Z18  // decay
	VBROADCASTSS 12(AX), Z19 // b1
	VBROADCASTSS 16(AX), Z20 // c1
	VBROADCASTSS 20(AX), Z21 // b2
	VBROADCASTSS 24(AX), Z22 // c2
	VBROADCASTSS 28(AX), Z23 // stepSize
	VBROADCASTSS 32(AX), Z24 // invBC2Sqrt
	VBROADCASTSS 36(AX), Z25 // eps
	SHRQ $4, CX
	JZ   done

loop:
	VMOVUPS (DI), Z0          // p
	VMOVUPS (SI), Z1          // grad
	VMULPS  Z16, Z1, Z1       // grad·scale
	VMULPS  Z17, Z0, Z2       // l2·p
	VADDPS  Z2, Z1, Z1        // g
	VMULPS  (R8), Z19, Z3     // b1·m
	VMULPS  Z20, Z1, Z4       // c1·g
	VADDPS  Z4, Z3, Z3        // m'
	VMULPS  Z1, Z1, Z5        // g·g
	VMULPS  Z22, Z5, Z5       // c2·(g·g)
	VMULPS  (R9), Z21, Z6     // b2·v
	VADDPS  Z5, Z6, Z6        // v'
	VMOVUPS Z3, (R8)
	VMOVUPS Z6, (R9)
	VSQRTPS Z6, Z7            // √v'
	VMULPS  Z24, Z7, Z7       // ·invBC2Sqrt
	VADDPS  Z25, Z7, Z7       // denom
	VDIVPS  Z7, Z3, Z7        // m'/denom
	VMULPS  Z23, Z7, Z7       // stepSize·(m'/denom)
	VMULPS  Z18, Z0, Z0       // p·decay
	VSUBPS  Z7, Z0, Z0        // p'
	VMOVUPS Z0, (DI)
	ADDQ    $64, DI
	ADDQ    $64, SI
	ADDQ    $64, R8
	ADDQ    $64, R9
	DECQ    CX
	JNZ     loop

done:
	VZEROUPPER
	RET

// func sumSquares4F32AVX512(a, b, c, d *float32, n int, out *[16]float64)
//
// sumSquares's main loop over the first n (a multiple of 4) elements of four blocks at
// once, one block per YMM accumulator whose lane j adds the squares of the elements j mod
// 4 in order, as sumSquares's s_j does. A float32's square is exact in float64, so the
// fused multiply-add rounds as sumSquares's multiply then add: the lanes are bit for bit
// its accumulators; the four independent blocks are what hide the add's latency.
// Prefetching each block 2 KiB ahead ran BenchmarkSumSquares at 15.0 against 12.3 GB/s
// (2-CPU VM, alternated; 1 KiB ahead 13.7, 4 KiB 12.9).
TEXT ·sumSquares4F32AVX512(SB), NOSPLIT, $0-48
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ c+16(FP), R8
	MOVQ d+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ out+40(FP), AX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	XORQ DX, DX
	MOVQ CX, BX
	ANDQ $-16, BX // the elements the unrolled loop takes

sumsq4loop16:
	// Four steps of sumsq4loop, 64 bytes of each block, with each block's line 2 KiB
	// ahead prefetched: the hardware prefetcher stops at every 4 KiB page of each of the
	// four streams.
	CMPQ DX, BX
	JGE  sumsq4loop
	PREFETCHT0 2048(SI)(DX*4)
	PREFETCHT0 2048(DI)(DX*4)
	PREFETCHT0 2048(R8)(DX*4)
	PREFETCHT0 2048(R9)(DX*4)
	VCVTPS2PD (SI)(DX*4), Y4
	VCVTPS2PD (DI)(DX*4), Y5
	VCVTPS2PD (R8)(DX*4), Y6
	VCVTPS2PD (R9)(DX*4), Y7
	VFMADD231PD Y4, Y4, Y0
	VFMADD231PD Y5, Y5, Y1
	VFMADD231PD Y6, Y6, Y2
	VFMADD231PD Y7, Y7, Y3
	VCVTPS2PD 16(SI)(DX*4), Y4
	VCVTPS2PD 16(DI)(DX*4), Y5
	VCVTPS2PD 16(R8)(DX*4), Y6
	VCVTPS2PD 16(R9)(DX*4), Y7
	VFMADD231PD Y4, Y4, Y0
	VFMADD231PD Y5, Y5, Y1
	VFMADD231PD Y6, Y6, Y2
	VFMADD231PD Y7, Y7, Y3
	VCVTPS2PD 32(SI)(DX*4), Y4
	VCVTPS2PD 32(DI)(DX*4), Y5
	VCVTPS2PD 32(R8)(DX*4), Y6
	VCVTPS2PD 32(R9)(DX*4), Y7
	VFMADD231PD Y4, Y4, Y0
	VFMADD231PD Y5, Y5, Y1
	VFMADD231PD Y6, Y6, Y2
	VFMADD231PD Y7, Y7, Y3
	VCVTPS2PD 48(SI)(DX*4), Y4
	VCVTPS2PD 48(DI)(DX*4), Y5
	VCVTPS2PD 48(R8)(DX*4), Y6
	VCVTPS2PD 48(R9)(DX*4), Y7
	VFMADD231PD Y4, Y4, Y0
	VFMADD231PD Y5, Y5, Y1
	VFMADD231PD Y6, Y6, Y2
	VFMADD231PD Y7, Y7, Y3
	ADDQ $16, DX
	JMP  sumsq4loop16

sumsq4loop:
	CMPQ DX, CX
	JGE  sumsq4done
	VCVTPS2PD (SI)(DX*4), Y4
	VCVTPS2PD (DI)(DX*4), Y5
	VCVTPS2PD (R8)(DX*4), Y6
	VCVTPS2PD (R9)(DX*4), Y7
	VFMADD231PD Y4, Y4, Y0
	VFMADD231PD Y5, Y5, Y1
	VFMADD231PD Y6, Y6, Y2
	VFMADD231PD Y7, Y7, Y3
	ADDQ $4, DX
	JMP  sumsq4loop

sumsq4done:
	VMOVUPD Y0, 0(AX)
	VMOVUPD Y1, 32(AX)
	VMOVUPD Y2, 64(AX)
	VMOVUPD Y3, 96(AX)
	VZEROUPPER
	RET
