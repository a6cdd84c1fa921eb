package parallel_test

import (
	"context"
	"strings"
	"testing"

	"megago/parallel"
	"megago/tensor"
)

// TestAllToAllVPanics checks the caller bugs AllToAllV panics on, on a group of two.
func TestAllToAllVPanics(t *testing.T) {
	cpu := tensor.NewCPU()
	cases := []struct {
		name       string
		dst, src   *tensor.Tensor
		send, recv []int
		want       string
	}{
		{"dtypes differ", tensor.Zeros(cpu, tensor.F32, 2), tensor.Zeros(cpu, tensor.BF16, 2), []int{1, 1}, []int{1, 1}, "dtypes differ"},
		{"one count", tensor.Zeros(cpu, tensor.F32, 2), tensor.Zeros(cpu, tensor.F32, 2), []int{2}, []int{1, 1}, "1 send counts for 2 ranks"},
		{"negative", tensor.Zeros(cpu, tensor.F32, 2), tensor.Zeros(cpu, tensor.F32, 2), []int{1, 1}, []int{3, -1}, "recv count -1 for rank 1"},
		{"sum", tensor.Zeros(cpu, tensor.F32, 2), tensor.Zeros(cpu, tensor.F32, 2, 2), []int{1, 1}, []int{1, 1}, "send counts [1 1] sum to 2, tensor [2 2] has 4"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := parallel.RunLocal(2, func(c parallel.Comm) error {
				defer func() {
					p := recover()
					if s, _ := p.(string); !strings.Contains(s, tc.want) {
						t.Errorf("rank %d: panic %v, want one containing %q", c.Rank(), p, tc.want)
					}
				}()
				return c.AllToAllV(context.Background(), tc.dst, tc.src, tc.send, tc.recv)
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
