//go:build !amd64 || purego

package tensor

const hasAttnRowAVX512 = false

func attnRowScoresAVX512(q, k, v *float32, ld, hs, blocks int, s *float32) {
	panic("tensor: attnRowScoresAVX512 without AVX-512")
}

func attnRowPVAVX512(p, v *float32, ld, n, hs int, o *float32) {
	panic("tensor: attnRowPVAVX512 without AVX-512")
}
