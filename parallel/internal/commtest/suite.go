package commtest

import (
	"context"
	"fmt"

	"megago/parallel"
	"megago/tensor"
)

// dtypes are the dtypes the suite covers.
var dtypes = []tensor.DType{tensor.F32, tensor.F64, tensor.BF16, tensor.I64}

// Value is what group rank r contributes at element i of case k: small integers,
// negative at odd i. Every partial sum over up to 8 ranks stays below 256 in magnitude,
// so it is exact in bfloat16 too and any reduction order gives the same bits.
func Value(k, r, i int) float64 {
	v := float64((k*7 + r*10 + i) % 29)
	if i%2 == 1 {
		v = -v
	}
	return v
}

// Values returns Value(k, r, i) for i in [0, n).
func Values(k, r, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = Value(k, r, i)
	}
	return v
}

// Tensor returns a tensor of dtype dt holding vals.
func Tensor(dev *tensor.Device, dt tensor.DType, vals []float64, shape ...int) *tensor.Tensor {
	switch dt {
	case tensor.F64:
		return tensor.FromSlice(dev, vals, shape...)
	case tensor.F32:
		s := make([]float32, len(vals))
		for i, v := range vals {
			s[i] = float32(v)
		}
		return tensor.FromSlice(dev, s, shape...)
	case tensor.BF16:
		s := make([]tensor.BFloat16, len(vals))
		for i, v := range vals {
			s[i] = tensor.BF16FromFloat32(float32(v))
		}
		return tensor.FromSlice(dev, s, shape...)
	case tensor.I64:
		s := make([]int64, len(vals))
		for i, v := range vals {
			s[i] = int64(v)
		}
		return tensor.FromSlice(dev, s, shape...)
	case tensor.I32:
		s := make([]int32, len(vals))
		for i, v := range vals {
			s[i] = int32(v)
		}
		return tensor.FromSlice(dev, s, shape...)
	}
	panic(fmt.Sprintf("Tensor: dtype %v", dt))
}

// Reduce is the reference reduction of element i over n ranks: exact, then the Avg
// division done as the dtype does it (in float32 for F32 and BF16, rounded to BF16;
// truncated for integers).
func Reduce(dt tensor.DType, op parallel.Op, k, n, i int) float64 {
	acc := Value(k, 0, i)
	for r := 1; r < n; r++ {
		v := Value(k, r, i)
		switch op {
		case parallel.Max:
			acc = max(acc, v)
		case parallel.Min:
			acc = min(acc, v)
		default:
			acc += v
		}
	}
	if op != parallel.Avg {
		return acc
	}
	switch dt {
	case tensor.F32:
		return float64(float32(acc) / float32(n))
	case tensor.BF16:
		return float64(tensor.BF16FromFloat32(float32(acc) / float32(n)).Float32())
	case tensor.I64:
		return float64(int64(acc) / int64(n))
	}
	return acc / float64(n)
}

// Check compares t with want exactly.
func Check(what string, t *tensor.Tensor, want []float64) error {
	got := tensor.ToSlice[float64](t)
	if len(got) != len(want) {
		return fmt.Errorf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("%s: element %d = %v, want %v", what, i, got[i], want[i])
		}
	}
	return nil
}

// Suite runs every collective of c on tensors of dev and checks the results.
// Every rank of c must call it.
func Suite(ctx context.Context, c parallel.Comm, dev *tensor.Device) error {
	for _, dt := range dtypes {
		for _, m := range []int{1, 7, 1000} {
			if err := checkReductions(ctx, c, dev, dt, m); err != nil {
				return err
			}
			if err := checkMovement(ctx, c, dev, dt, m); err != nil {
				return err
			}
		}
	}
	if err := checkSendRecv(ctx, c, dev); err != nil {
		return err
	}
	if err := checkAllToAllV(ctx, c, dev); err != nil {
		return err
	}
	for range 2 {
		if err := c.Barrier(ctx); err != nil {
			return err
		}
	}
	if err := checkSplit(ctx, c, dev); err != nil {
		return err
	}
	return c.Barrier(ctx)
}

// checkReductions checks AllReduce with m elements and ReduceScatter with m per rank.
func checkReductions(ctx context.Context, c parallel.Comm, dev *tensor.Device, dt tensor.DType, m int) error {
	n, r := c.Size(), c.Rank()
	for k, op := range []parallel.Op{parallel.Sum, parallel.Max, parallel.Min, parallel.Avg} {
		x := Tensor(dev, dt, Values(k, r, m), m)
		if err := c.AllReduce(ctx, x, op); err != nil {
			return err
		}
		want := make([]float64, m)
		for i := range want {
			want[i] = Reduce(dt, op, k, n, i)
		}
		if err := Check(fmt.Sprintf("rank %d: all-reduce %v of %v×%d", r, op, dt, m), x, want); err != nil {
			return err
		}

		src := Tensor(dev, dt, Values(k, r, n*m), n, m)
		dst := tensor.Zeros(dev, dt, m)
		if err := c.ReduceScatter(ctx, dst, src, op); err != nil {
			return err
		}
		for i := range want {
			want[i] = Reduce(dt, op, k, n, r*m+i)
		}
		if err := Check(fmt.Sprintf("rank %d: reduce-scatter %v of %v×%d×%d", r, op, dt, n, m), dst, want); err != nil {
			return err
		}
	}
	return nil
}

// checkMovement checks AllGather of [2, m] blocks and Broadcast from several roots.
func checkMovement(ctx context.Context, c parallel.Comm, dev *tensor.Device, dt tensor.DType, m int) error {
	n, r := c.Size(), c.Rank()
	src := Tensor(dev, dt, Values(1, r, 2*m), 2, m)
	dst := tensor.Zeros(dev, dt, 2*n, m)
	if err := c.AllGather(ctx, dst, src); err != nil {
		return err
	}
	var want []float64
	for q := range n {
		want = append(want, Values(1, q, 2*m)...)
	}
	if err := Check(fmt.Sprintf("rank %d: all-gather of %v×2×%d", r, dt, m), dst, want); err != nil {
		return err
	}
	for _, root := range []int{0, n - 1, n / 2} {
		x := Tensor(dev, dt, Values(2, r, m), m)
		if err := c.Broadcast(ctx, x, root); err != nil {
			return err
		}
		if err := Check(fmt.Sprintf("rank %d: broadcast of %v×%d from %d", r, dt, m, root), x, Values(2, root, m)); err != nil {
			return err
		}
	}
	return nil
}

// checkSendRecv sends four messages of different dtypes and sizes around the ring,
// every rank sending before it receives.
func checkSendRecv(ctx context.Context, c parallel.Comm, dev *tensor.Device) error {
	n, r := c.Size(), c.Rank()
	if n == 1 {
		return nil
	}
	right, left := (r+1)%n, (r+n-1)%n
	msgs := []struct {
		dt tensor.DType
		m  int
	}{{tensor.F32, 5}, {tensor.I64, 1000}, {tensor.BF16, 1}, {tensor.F64, 7}}
	for k, msg := range msgs {
		if err := c.Send(ctx, Tensor(dev, msg.dt, Values(k, r, msg.m), msg.m), right); err != nil {
			return err
		}
	}
	for k, msg := range msgs {
		x := tensor.Zeros(dev, msg.dt, msg.m)
		if err := c.Recv(ctx, x, left); err != nil {
			return err
		}
		if err := Check(fmt.Sprintf("rank %d: message %d from %d", r, k, left), x, Values(k, left, msg.m)); err != nil {
			return err
		}
	}
	return nil
}

// checkSplit splits c by rank parity, keyed in reverse rank order, and checks the
// groups' membership and collectives, interleaved with collectives on c.
func checkSplit(ctx context.Context, c parallel.Comm, dev *tensor.Device) error {
	n, r := c.Size(), c.Rank()
	g, err := c.Split(ctx, "parity", r%2, -r)
	if err != nil {
		return err
	}
	var members []int
	for q := n - 1; q >= 0; q-- {
		if q%2 == r%2 {
			members = append(members, q)
		}
	}
	if g.Size() != len(members) || g.Name() != "parity" || g.WorldRank(g.Rank()) != c.WorldRank(r) {
		return fmt.Errorf("rank %d: split gave group %q of size %d with rank %d", r, g.Name(), g.Size(), g.Rank())
	}
	sum := 0
	for i, q := range members {
		if g.WorldRank(i) != c.WorldRank(q) {
			return fmt.Errorf("rank %d: split group rank %d is world rank %d, want %d", r, i, g.WorldRank(i), c.WorldRank(q))
		}
		sum += q
	}
	x := Tensor(dev, tensor.I64, []float64{float64(r)}, 1)
	if err := g.AllReduce(ctx, x, parallel.Sum); err != nil {
		return err
	}
	if err := Check(fmt.Sprintf("rank %d: all-reduce on the parity group", r), x, []float64{float64(sum)}); err != nil {
		return err
	}
	// A collective on the parent between two on the child: frames must not mix.
	y := Tensor(dev, tensor.F32, []float64{1}, 1)
	if err := c.AllReduce(ctx, y, parallel.Sum); err != nil {
		return err
	}
	if err := Check(fmt.Sprintf("rank %d: world all-reduce after split", r), y, []float64{float64(n)}); err != nil {
		return err
	}
	z := Tensor(dev, tensor.F64, Values(3, r, 9), 9)
	if err := g.Broadcast(ctx, z, 0); err != nil {
		return err
	}
	if err := Check(fmt.Sprintf("rank %d: broadcast on the parity group", r), z, Values(3, members[0], 9)); err != nil {
		return err
	}
	if g.Size() > 1 {
		to, from := (g.Rank()+1)%g.Size(), (g.Rank()+g.Size()-1)%g.Size()
		if err := g.Send(ctx, Tensor(dev, tensor.F32, Values(4, r, 3), 3), to); err != nil {
			return err
		}
		w := tensor.Zeros(dev, tensor.F32, 3)
		if err := g.Recv(ctx, w, from); err != nil {
			return err
		}
		if err := Check(fmt.Sprintf("rank %d: message on the parity group", r), w, Values(4, members[from], 3)); err != nil {
			return err
		}
	}
	// A split of the split, and a rank that joins no group.
	h, err := g.Split(ctx, "all", 0, 0)
	if err != nil {
		return err
	}
	if err := h.Barrier(ctx); err != nil {
		return err
	}
	none, err := c.Split(ctx, "none", -1, 0)
	if err != nil || none != nil {
		return fmt.Errorf("rank %d: split with a negative color gave %v, %v", r, none, err)
	}
	return nil
}
