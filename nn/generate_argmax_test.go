package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCheckedArgmaxMatchesSerial: the four-lane argmax gives the plain loop's index, or
// its error, for rows of every length mod 4 with ties (the first wins), +0 beside −0,
// −Inf (banned ids), NaN and +Inf at every kind of position.
func TestCheckedArgmaxMatchesSerial(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	negZero := math.Copysign(0, -1)
	specials := []float64{math.Inf(-1), math.NaN(), math.Inf(1), negZero, 0}
	for _, n := range []int{0, 1, 2, 3, 4, 5, 7, 8, 9, 13, 50257} {
		for trial := range 40 {
			x := make([]float64, n)
			for i := range x {
				x[i] = float64(r.IntN(5)) // few values: many ties
				if trial%2 == 1 {
					x[i] = -x[i] // ties at 0 with −0 below
				}
			}
			if n > 0 && trial >= 10 { // one or two special values
				for range 1 + trial%2 {
					x[r.IntN(n)] = specials[r.IntN(len(specials))]
				}
			}
			if n > 0 && trial == 39 { // all −Inf
				for i := range x {
					x[i] = math.Inf(-1)
				}
			}
			t.Run(fmt.Sprintf("n%d/%d", n, trial), func(t *testing.T) {
				wantID, wantErr := checkedArgmaxSerial(x)
				gotID, gotErr := checkedArgmax(x)
				require.Equal(t, wantErr, gotErr)
				require.Equal(t, wantID, gotID)
			})
		}
	}
}

func BenchmarkCheckedArgmax(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float64, 50257) // GPT-2's vocabulary
	for i := range x {
		x[i] = r.NormFloat64()
	}
	for name, f := range map[string]func([]float64) (int, error){"lanes": checkedArgmax, "serial": checkedArgmaxSerial} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				f(x)
			}
		})
	}
}
