package tensor

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPoolSize checks the pool's buffer sizes against values worked out by hand: exact up
// to 2^14 elements, above it the next multiple of 2^(L-4) for n in (2^(L-1), 2^L].
func TestPoolSize(t *testing.T) {
	for _, c := range []struct{ n, want int }{
		{0, 0}, {1, 1}, {777, 777}, {1 << 14, 1 << 14},
		{1<<14 + 1, 1<<14 + 1<<11}, // (2^14, 2^15]: steps of 2^11
		{100000, 13 * 8192},        // (2^16, 2^17]: steps of 2^13
		{1 << 20, 1 << 20},         // a power of two is a size
		{1<<20 + 1, 1<<20 + 1<<17},
		{32 * 3072, 32 * 3072}, // 98304 = 12·2^13
		{31 * 3072, 98304},     // 95232 rounds up to the 32-row size
	} {
		require.Equal(t, c.want, poolSize(c.n), "poolSize(%d)", c.n)
	}
	for n := 1; n < 1<<22; n = n*5/4 + 1 { // within 1/8 above n, never below
		if s := poolSize(n); s < n || 8*(s-n) > n {
			t.Fatalf("poolSize(%d) = %d", n, s)
		}
	}
}

// TestPoolSharesNearbySizes checks that a tensor of a size near a released one reuses its
// storage: nothing fresh is allocated, and the statistics count what the tensors hold.
func TestPoolSharesNearbySizes(t *testing.T) {
	dev := NewCPU()
	a := Zeros(dev, F32, 32, 3072)
	a.Release()
	before := dev.Stats()
	b := Full(dev, F32, 2, 31, 3072)
	st := dev.Stats()
	require.Equal(t, before.Fresh, st.Fresh, "a 31-row tensor should take the 32-row buffer")
	require.Equal(t, int64(31*3072*4), st.InUse)
	require.Equal(t, int64(32*3072*4), st.Reserved)
	got := ToSlice[float32](b)
	require.Len(t, got, 31*3072)
	for _, v := range got {
		require.Equal(t, float32(2), v)
	}
}
