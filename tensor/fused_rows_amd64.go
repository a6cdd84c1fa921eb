//go:build !purego

package tensor

//go:noescape
func dropKeepAVX512(bits []uint8, blk0 uint64, key0, key1 uint32, thresh uint64)
