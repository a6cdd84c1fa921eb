package tensor

import (
	"sync"
	"testing"
)

// TestForSegments checks that forSegments visits every element of every segment exactly
// once, with the segment's index, in chunks of at most optimChunk that stay inside one
// segment, and nothing outside the segments, whether the walk is split across goroutines
// or not.
func TestForSegments(t *testing.T) {
	for _, tc := range []struct {
		name string
		segs []OptimSegment
	}{
		{"none", nil},
		{"one small", []OptimSegment{{Off: 3, N: 10}}},
		{"gaps and empties", []OptimSegment{{Off: 1, N: 70000}, {Off: 70001, N: 0}, {Off: 70010, N: 5}, {Off: 80000, N: 3 * optimGrain}, {Off: 180000, N: 0}}},
		{"many", func() []OptimSegment {
			var s []OptimSegment
			for i := range 200 {
				s = append(s, OptimSegment{Off: i * 3000, N: 2999 - i%7})
			}
			return s
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			end := 0
			for _, sg := range tc.segs {
				end = max(end, sg.Off+sg.N)
			}
			seen := make([]int, end) // how many times element e was visited
			seg := make([]int, end)  // by which segment
			var mu sync.Mutex
			forSegments(tc.segs, func(si, a, b int) {
				mu.Lock()
				defer mu.Unlock()
				sg := tc.segs[si]
				if a >= b || b-a > optimChunk || a < sg.Off || b > sg.Off+sg.N {
					t.Errorf("chunk [%d, %d) of segment %d %+v", a, b, si, sg)
					return
				}
				for e := a; e < b; e++ {
					seen[e]++
					seg[e] = si
				}
			})
			inside := make([]int, end) // the segment holding e, +1 (0: none)
			for si, sg := range tc.segs {
				for e := sg.Off; e < sg.Off+sg.N; e++ {
					inside[e] = si + 1
				}
			}
			for e := range seen {
				switch {
				case inside[e] == 0 && seen[e] != 0:
					t.Fatalf("element %d outside the segments visited %d times", e, seen[e])
				case inside[e] != 0 && (seen[e] != 1 || seg[e] != inside[e]-1):
					t.Fatalf("element %d of segment %d visited %d times (last as segment %d)", e, inside[e]-1, seen[e], seg[e])
				}
			}
		})
	}
}
