//go:build !purego

package tensor

import "golang.org/x/sys/cpu"

// hasAttnRowAVX512 reports whether the one-query tile products of cpu_attention_decode.go
// can run on AVX-512.
var hasAttnRowAVX512 = cpu.X86.HasAVX512F

// attnRowScoresAVX512 sets s[16b+l] = Σ_d q[d]·k[(16b+l)·ld+d] for b < blocks, l < 16 and
// d < hs, a positive multiple of 16, each sum one chain of fused multiply-adds over d in
// order from zero. It prefetches v's rows of the same positions (v has k's row stride
// ld), which the values' product reads next.
//
//go:noescape
func attnRowScoresAVX512(q, k, v *float32, ld, hs, blocks int, s *float32)

// attnRowPVAVX512 adds to o[c] the sum Σ_j p[j]·v[j·ld+c] for j < n (n ≥ 1) and c < hs, a
// positive multiple of 16, the sum one chain of fused multiply-adds over j in order from
// zero.
//
//go:noescape
func attnRowPVAVX512(p, v *float32, ld, n, hs int, o *float32)
