package data

import "testing"

func TestParseSplit(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want [3]float64
		bad  bool
	}{
		{name: "megatron default", in: "969,30,1", want: [3]float64{0.969, 0.03, 0.001}},
		{name: "empty means default", in: "", want: [3]float64{0.969, 0.03, 0.001}},
		{name: "slashes", in: "8/1/1", want: [3]float64{0.8, 0.1, 0.1}},
		{name: "missing weights are zero", in: "1", want: [3]float64{1, 0, 0}},
		{name: "two weights", in: "3, 1", want: [3]float64{0.75, 0.25, 0}},
		{name: "four weights", in: "1,1,1,1", bad: true},
		{name: "not a number", in: "a,1", bad: true},
		{name: "negative", in: "-1,2", bad: true},
		{name: "all zero", in: "0,0,0", bad: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSplit(tc.in)
			if tc.bad {
				if err == nil {
					t.Fatalf("ParseSplit(%q) = %v, want an error", tc.in, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if d := got[i] - tc.want[i]; d > 1e-15 || d < -1e-15 {
					t.Fatalf("ParseSplit(%q) = %v, want %v", tc.in, got, tc.want)
				}
			}
		})
	}
}

func TestSplitBoundaries(t *testing.T) {
	tests := []struct {
		name  string
		split string
		n     int
		want  [4]int
	}{
		{name: "969,30,1 of 1000", split: "969,30,1", n: 1000, want: [4]int{0, 969, 999, 1000}},
		// 0.5·5 = 2.5 rounds to 2 (half to even) twice; the sum 4 is 1 short, so every
		// boundary after the first moves up by 1. Rounding half away from zero would give
		// 3 and 3, 1 too many, and boundaries [0 2 5 5].
		{name: "half to even", split: "1,1", n: 5, want: [4]int{0, 3, 5, 5}},
		// 10/3 rounds to 3 three times: 9, 1 short.
		{name: "thirds of 10", split: "1,1,1", n: 10, want: [4]int{0, 4, 7, 10}},
		{name: "train only", split: "1", n: 7, want: [4]int{0, 7, 7, 7}},
		{name: "nothing", split: "969,30,1", n: 0, want: [4]int{0, 0, 0, 0}},
		// 0.969·3 = 2.907 → 3, 0.09 → 0, 0.003 → 0.
		{name: "tiny", split: "969,30,1", n: 3, want: [4]int{0, 3, 3, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, err := ParseSplit(tc.split)
			if err != nil {
				t.Fatal(err)
			}
			if got := SplitBoundaries(w, tc.n); got != tc.want {
				t.Errorf("SplitBoundaries(%q, %d) = %v, want %v", tc.split, tc.n, got, tc.want)
			}
		})
	}
}
