//go:build !amd64 || purego

package tensor

func dropKeepAVX512([]uint8, uint64, uint32, uint32, uint64) { panic("unreachable") }
