package parallel_test

import (
	"fmt"
	"os"
	"time"

	"megago/parallel"
)

// Simulate lays out a schedule on 2 stages with ideal timing (a stage's forward step
// takes 2 ms, its backward 4 ms, split over the model chunks); WriteTimeline shows the
// bubbles, one column per millisecond, and BubbleFraction measures them: (p−1)/(M+p−1)
// for 1F1B, (p−1)/(V·M+p−1) interleaved.
func ExampleWriteTimeline() {
	for _, s := range []parallel.Schedule{parallel.OneFOneB{M: 4}, parallel.Interleaved{M: 4, V: 2}} {
		f := 2 * time.Millisecond / time.Duration(s.Chunks())
		traces, err := parallel.Simulate(s, 2, f, 2*f)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%v: bubble %.3f\n", s, parallel.BubbleFraction(traces))
		evs := traces[0].Events() // stage 0 runs the last backward step
		parallel.WriteTimeline(os.Stdout, traces, int(evs[len(evs)-1].End/time.Millisecond))
	}
	// Output:
	// 1f1b-m4: bubble 0.200
	// stage 0  FFFF....BBBBFFBBBBFFBBBB..BBBB
	//          0011....0000221111332222..3333
	// stage 1  ..FFBBBBFFBBBBFFBBBBFFBBBB....
	//          ..000000111111222222333333....
	// interleaved-m4-v2: bubble 0.111
	// stage 0  FFffF.bbFbbfBBfBB.bb.bbBBBB
	//          01012.00311200311.22.332233
	// stage 1  .FFfbbfbbFBBFBBfbbfbbBBBB..
	//          .010001112003112223332233..
}
