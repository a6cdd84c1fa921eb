package data

import (
	"math"
	"testing"
)

// drawSpan's lengths follow P(n) ∝ 1/n (BERT) and the clipped geometric law (T5).
func TestDrawSpanDistribution(t *testing.T) {
	const draws = 200000
	r := newRNG(1, "test", 0)
	tests := []struct {
		name string
		spec maskSpec
		max  int
		want func(n int) float64
	}{
		// 1/n over n = 1..3: 6/11, 3/11, 2/11.
		{name: "bert", spec: maskSpec{maxNgram: 3}, max: 3, want: func(n int) float64 { return 6.0 / 11 / float64(n) }},
		{name: "t5", spec: maskSpec{maxNgram: 10, geometricP: 0.2}, max: 10, want: func(n int) float64 {
			if n == 10 {
				return math.Pow(0.8, 9) // the clipped tail P(N ≥ 10)
			}
			return 0.2 * math.Pow(0.8, float64(n-1))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			count := make([]int, tc.max+1)
			for range draws {
				count[tc.spec.drawSpan(tc.max, r)]++
			}
			for n := 1; n <= tc.max; n++ {
				got, want := float64(count[n])/draws, tc.want(n)
				// 5 standard deviations of a binomial proportion
				if tol := 5 * math.Sqrt(want*(1-want)/draws); math.Abs(got-want) > tol {
					t.Errorf("P(%d) = %.4f, want %.4f ± %.4f", n, got, want, tol)
				}
			}
			if count[0] != 0 {
				t.Errorf("drew %d spans of length 0", count[0])
			}
		})
	}
}

func TestWholeWords(t *testing.T) {
	// 100 and 101 continue a word; position 3 is a special token, so the 100 after it
	// starts a new word.
	toks := []int32{5, 100, 6, 1, 100, 7, 101, 101}
	words := wholeWords(toks, func(i int) bool { return i != 3 }, func(id int32) bool { return id >= 100 })
	want := [][]int{{0, 1}, {2}, {4}, {5, 6, 7}}
	if len(words) != len(want) {
		t.Fatalf("words = %v, want %v", words, want)
	}
	for i := range want {
		if len(words[i]) != len(want[i]) || words[i][0] != want[i][0] || words[i][len(words[i])-1] != want[i][len(want[i])-1] {
			t.Fatalf("words = %v, want %v", words, want)
		}
	}
}

func TestChooseSpansBudget(t *testing.T) {
	r := newRNG(3, "test", 0)
	for trial := range 200 {
		n := 10 + trial
		toks := make([]int32, n)
		spans := chooseSpans(toks, func(int) bool { return true }, maskSpec{prob: 0.15, maxNgram: 3}, r)
		seen := map[int]bool{}
		masked := 0
		for _, s := range spans {
			for _, i := range s {
				if seen[i] {
					t.Fatalf("position %d masked twice", i)
				}
				seen[i] = true
			}
			masked += len(s)
		}
		// single-token words can always fill the budget exactly
		if want := numToPredict(n, 0.15); masked != want {
			t.Fatalf("%d tokens: masked %d, want %d", n, masked, want)
		}
	}
}
