package param_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"megago/nn/param"
	"megago/tensor"
)

// shard returns the TP shard of a global parameter of shape global split along dim
// (−1: not split) over tp ranks, as rank rank holds it.
func shard(global tensor.Shape, dim, tp, rank int) *param.Param {
	local := global.Clone()
	if dim >= 0 {
		local[dim] /= tp
	} else {
		rank = 0
	}
	return &param.Param{Tensor: tensor.Zeros(tensor.NewCPU(), tensor.F32, local...), Name: "w",
		GlobalShape: global, PartitionDim: dim, PartitionStride: 1, TPRank: rank}
}

func TestStartRegion(t *testing.T) {
	for _, tc := range []struct {
		name          string
		global        tensor.Shape
		dim, tp, rank int
		start         []int
		size          tensor.Shape
	}{
		{"replicated", tensor.Shape{6, 4}, -1, 2, 1, []int{0, 0}, tensor.Shape{6, 4}},
		{"rows rank 0", tensor.Shape{6, 4}, 0, 3, 0, []int{0, 0}, tensor.Shape{2, 4}},
		{"rows rank 2", tensor.Shape{6, 4}, 0, 3, 2, []int{4, 0}, tensor.Shape{2, 4}},
		{"columns rank 1", tensor.Shape{6, 4}, 1, 2, 1, []int{0, 2}, tensor.Shape{6, 2}},
		{"vector rank 3", tensor.Shape{8}, 0, 4, 3, []int{6}, tensor.Shape{2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := shard(tc.global, tc.dim, tc.tp, tc.rank)
			assert.Equal(t, tc.start, p.Start())
			assert.Equal(t, tensor.Region{Full: tc.global, Start: tc.start, Size: tc.size}, p.Region())
		})
	}
}

// A column-parallel weight [Vp, C] = [8, 3] split over 4 TP ranks: rank 2 holds rows
// [4, 6) of the global parameter.
func ExampleParam_Region() {
	p := &param.Param{Tensor: tensor.Zeros(tensor.NewCPU(), tensor.F32, 2, 3), Name: "output.weight",
		GlobalShape: tensor.Shape{8, 3}, PartitionDim: 0, PartitionStride: 1, TPRank: 2}
	r := p.Region()
	fmt.Println(r.Full, r.Start, r.Size)
	// Output: [8 3] [4 0] [2 3]
}
