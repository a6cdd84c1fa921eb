package parallel

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// The context-parallel mappings, forward and backward, against values placed here element
// by element from their definitions, on 1 to 4 ranks.

// cpTestShape is the [B, H, m, HS] of the tests: m positions per chunk, H divisible by
// 1, 2, 3 and 4.
var cpTestShape = [4]int{2, 12, 2, 2}

// lbPositions returns the sequence positions rank r of n holds, in order: chunks r and
// 2n−1−r of m positions.
func lbPositions(m, n, r int) []int {
	var pos []int
	for _, c := range []int{r, 2*n - 1 - r} {
		for i := range m {
			pos = append(pos, c*m+i)
		}
	}
	return pos
}

// at returns the row-major index of [b, h, s, d] in a tensor of heads h and positions s.
func at(heads, seq, b, h, s, d int) int {
	return ((b*heads+h)*seq+s)*cpTestShape[3] + d
}

func TestCPMappings(t *testing.T) {
	bs, hn, m, hs := cpTestShape[0], cpTestShape[1], cpTestShape[2], cpTestShape[3]
	cases := []struct {
		name string
		run  func(c Comm, dev *tensor.Device, n, r int) error
	}{
		{"AllToAllCPSeqToHeads", func(c Comm, dev *tensor.Device, n, r int) error {
			h, seq := hn/n, 2*n*m
			in := ranked(dev, 1, r, bs, hn, 2*m, hs)
			y := AllToAllCPSeqToHeads(bg, c, in)
			want := make([]float64, bs*h*seq*hs)  // heads of rank r, every rank's positions
			grad := make([]float64, bs*hn*2*m*hs) // from rank q's gradient, heads block q
			for q := range n {
				xq, gq := values(1, q, bs*hn*2*m*hs), values(2, q, bs*h*seq*hs)
				for b := range bs {
					for j := range h {
						for i, p := range lbPositions(m, n, q) {
							for d := range hs {
								want[at(h, seq, b, j, p, d)] = xq[at(hn, 2*m, b, r*h+j, i, d)]
							}
						}
						for i, p := range lbPositions(m, n, r) {
							for d := range hs {
								grad[at(hn, 2*m, b, q*h+j, i, d)] = gq[at(h, seq, b, j, p, d)]
							}
						}
					}
				}
			}
			if err := equalValues("forward", y, want); err != nil {
				return err
			}
			y.BackwardWithGrad(ranked(dev, 2, r, bs, h, seq, hs).Detach())
			return gradOf(in, grad)
		}},
		{"AllToAllCPHeadsToSeq", func(c Comm, dev *tensor.Device, n, r int) error {
			h, seq := hn/n, 2*n*m
			in := ranked(dev, 1, r, bs, h, seq, hs)
			y := AllToAllCPHeadsToSeq(bg, c, in)
			want := make([]float64, bs*hn*2*m*hs) // rank r's positions, heads block q from rank q
			grad := make([]float64, bs*h*seq*hs)  // from rank q's gradient, its positions
			for q := range n {
				yq, gq := values(1, q, bs*h*seq*hs), values(2, q, bs*hn*2*m*hs)
				for b := range bs {
					for j := range h {
						for i, p := range lbPositions(m, n, r) {
							for d := range hs {
								want[at(hn, 2*m, b, q*h+j, i, d)] = yq[at(h, seq, b, j, p, d)]
							}
						}
						for i, p := range lbPositions(m, n, q) {
							for d := range hs {
								grad[at(h, seq, b, j, p, d)] = gq[at(hn, 2*m, b, r*h+j, i, d)]
							}
						}
					}
				}
			}
			if err := equalValues("forward", y, want); err != nil {
				return err
			}
			y.BackwardWithGrad(ranked(dev, 2, r, bs, hn, 2*m, hs).Detach())
			return gradOf(in, grad)
		}},
		{"GatherFromCP", func(c Comm, dev *tensor.Device, n, r int) error {
			seq := 2 * n * m
			in := ranked(dev, 1, r, bs, hn, 2*m, hs)
			y := GatherFromCP(bg, c, in)
			want := make([]float64, bs*hn*seq*hs) // every rank's positions
			grad := make([]float64, bs*hn*2*m*hs) // Σ over ranks of their gradient at r's positions
			for q := range n {
				xq, gq := values(1, q, bs*hn*2*m*hs), values(2, q, bs*hn*seq*hs)
				for b := range bs {
					for j := range hn {
						for d := range hs {
							for i, p := range lbPositions(m, n, q) {
								want[at(hn, seq, b, j, p, d)] = xq[at(hn, 2*m, b, j, i, d)]
							}
							for i, p := range lbPositions(m, n, r) {
								grad[at(hn, 2*m, b, j, i, d)] += gq[at(hn, seq, b, j, p, d)]
							}
						}
					}
				}
			}
			if err := equalValues("forward", y, want); err != nil {
				return err
			}
			y.BackwardWithGrad(ranked(dev, 2, r, bs, hn, seq, hs).Detach())
			return gradOf(in, grad)
		}},
	}
	for _, tc := range cases {
		for n := 1; n <= 4; n++ {
			t.Run(fmt.Sprintf("%s/%d", tc.name, n), func(t *testing.T) {
				require.NoError(t, RunLocal(n, func(c Comm) error {
					return tc.run(c, tensor.NewCPU(), n, c.Rank())
				}))
			})
		}
	}
}

func TestCPMappingsPanic(t *testing.T) {
	require.NoError(t, RunLocal(2, func(c Comm) error {
		x := tensor.Zeros(tensor.NewCPU(), tensor.F64, 1, 3, 4, 2) // 3 heads over 2 ranks
		assert.PanicsWithValue(t, "parallel: AllToAllCPSeqToHeads on group world of 2: x [1 3 4 2] is not [B, H, S, HS] with H divisible by 2 and S by 2",
			func() { AllToAllCPSeqToHeads(bg, c, x) })
		return nil
	}))
}
