//go:build !purego

#include "textflag.h"

// func attnPrefetch(p *float32, lines int)
// Prefetches into every cache level the lines (64 bytes) at p and the lines−1 after it.
TEXT ·attnPrefetch(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ lines+8(FP), CX
	TESTQ CX, CX
	JLE prefetch_done
prefetch_line:
	PREFETCHT0 (AX)
	ADDQ $64, AX
	DECQ CX
	JNE prefetch_line
prefetch_done:
	RET
