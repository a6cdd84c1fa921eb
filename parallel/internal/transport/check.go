package transport

import (
	"fmt"

	"megago/tensor"
)

// CheckSizes panics, naming op, unless dst and src have the same dtype and fit a gather
// (gather true: dst holds size times src's elements) or a scatter (src holds size times
// dst's) over size ranks: these are caller bugs.
func CheckSizes(op string, dst, src *tensor.Tensor, size int, gather bool) {
	if dst.DType() != src.DType() {
		panic(fmt.Sprintf("parallel: %s: dst %v and src %v dtypes differ", op, dst.DType(), src.DType()))
	}
	big, small := dst, src
	if !gather {
		big, small = src, dst
	}
	if big.Numel() != size*small.Numel() {
		panic(fmt.Sprintf("parallel: %s: %v has %d elements, need %d × %v = %d", op, big.Shape(), big.Numel(), size, small.Shape(), size*small.Numel()))
	}
}

// CheckPeer panics, naming op, unless peer is a rank of the group other than rank.
func CheckPeer(op string, peer, rank, size int, group string) {
	if peer < 0 || peer >= size || peer == rank {
		panic(fmt.Sprintf("parallel: %s: peer %d invalid for rank %d of group %s (size %d)", op, peer, rank, group, size))
	}
}

// CheckRoot panics unless root is a rank of a group of size ranks.
func CheckRoot(root, size int, group string) {
	if root < 0 || root >= size {
		panic(fmt.Sprintf("parallel: Broadcast: root %d outside group %s of size %d", root, group, size))
	}
}
