package parallel

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// The MoE row mappings, forward and backward, against values computed here from their
// definitions, on 1 to 4 ranks with row counts that differ per rank (zeros included).

const rowWidth = 2

// moeRows is how many rows rank r contributes to GatherRowsV (0, 1, 2, 0, ...).
func moeRows(r int) int { return r % 3 }

// a2aRows is how many rows rank from sends rank to in AllToAllRows.
func a2aRows(from, to int) int { return (from + 2*to) % 3 }

// rowsOfRange returns rows [lo, hi) of the row-major values v of width rowWidth.
func rowsOfRange(v []float64, lo, hi int) []float64 { return v[lo*rowWidth : hi*rowWidth] }

func TestMoEMappings(t *testing.T) {
	cases := []struct {
		name string
		run  func(c Comm, dev *tensor.Device, n, r int) error
	}{
		{"GatherRowsV", func(c Comm, dev *tensor.Device, n, r int) error {
			rows, off := make([]int, n), make([]int, n+1)
			var want []float64
			for s := range n {
				rows[s], off[s+1] = moeRows(s), off[s]+moeRows(s)
				want = append(want, values(1, s, rows[s]*rowWidth)...)
			}
			in := ranked(dev, 1, r, rows[r], rowWidth)
			y := GatherRowsV(bg, c, in, rows)
			if err := equalValues("forward", y, want); err != nil {
				return err
			}
			y.BackwardWithGrad(ranked(dev, 2, r, off[n], rowWidth).Detach())
			grad := make([]float64, rows[r]*rowWidth) // Σ over ranks of their gradient's rows of r
			for s := range n {
				for i, v := range rowsOfRange(values(2, s, off[n]*rowWidth), off[r], off[r+1]) {
					grad[i] += v
				}
			}
			return gradOf(in, grad)
		}},
		{"ReduceScatterRowsV", func(c Comm, dev *tensor.Device, n, r int) error {
			rows, off := make([]int, n), make([]int, n+1)
			for s := range n {
				rows[s], off[s+1] = moeRows(s), off[s]+moeRows(s)
			}
			in := ranked(dev, 1, r, off[n], rowWidth)
			y := ReduceScatterRowsV(bg, c, in, rows)
			want := make([]float64, rows[r]*rowWidth)
			for s := range n {
				for i, v := range rowsOfRange(values(1, s, off[n]*rowWidth), off[r], off[r+1]) {
					want[i] += v
				}
			}
			if err := equalValues("forward", y, want); err != nil {
				return err
			}
			y.BackwardWithGrad(ranked(dev, 2, r, rows[r], rowWidth).Detach())
			var grad []float64 // every rank's gradient rows, in rank order
			for s := range n {
				grad = append(grad, values(2, s, rows[s]*rowWidth)...)
			}
			return gradOf(in, grad)
		}},
		{"AllToAllRows", func(c Comm, dev *tensor.Device, n, r int) error {
			send, recv := make([]int, n), make([]int, n)
			for q := range n {
				send[q], recv[q] = a2aRows(r, q), a2aRows(q, r)
			}
			// start(from, to) is where from's rows for to begin in from's input.
			start := func(from, to int) int {
				s := 0
				for q := range to {
					s += a2aRows(from, q)
				}
				return s
			}
			in := ranked(dev, 1, r, sumRows(send), rowWidth)
			y := AllToAllRows(bg, c, in, send, recv)
			var want []float64
			for q := range n {
				want = append(want, rowsOfRange(values(1, q, 100*rowWidth), start(q, r), start(q, r)+recv[q])...)
			}
			if err := equalValues("forward", y, want); err != nil {
				return err
			}
			y.BackwardWithGrad(ranked(dev, 2, r, sumRows(recv), rowWidth).Detach())
			var grad []float64 // from each destination q, its gradient rows of r's run
			for q := range n {
				before := 0 // rows q received from ranks before r
				for s := range r {
					before += a2aRows(s, q)
				}
				grad = append(grad, rowsOfRange(values(2, q, 100*rowWidth), before, before+send[q])...)
			}
			return gradOf(in, grad)
		}},
		{"GatherFromSPNoReduce", func(c Comm, dev *tensor.Device, n, r int) error {
			part, full := []int{2, 2, 3}, []int{2, 2 * n, 3}
			in := ranked(dev, 1, r, part...)
			y := GatherFromSPNoReduce(bg, c, in)
			parts := make([][]float64, n)
			for s := range parts {
				parts[s] = values(1, s, 12)
			}
			if err := equalValues("forward", y, concatAlong(parts, part, 1)); err != nil {
				return err
			}
			y.BackwardWithGrad(ranked(dev, 2, 0, full...).Detach()) // the same on every rank
			return gradOf(in, block(values(2, 0, 12*n), full, 1, 2*r, 2*r+2))
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

// gradOf checks x's gradient against want, an empty want standing for no rows.
func gradOf(x *tensor.Tensor, want []float64) error {
	if x.Numel() == 0 {
		return nil
	}
	if x.Grad() == nil {
		return fmt.Errorf("no gradient")
	}
	return equalValues("grad", x.Grad(), want)
}
