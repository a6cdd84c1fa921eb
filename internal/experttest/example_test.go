package experttest_test

import (
	"fmt"

	"megago/internal/experttest"
)

// World 8 as PP 2 × DP 4 for dense parameters and EP 2 × expert-DP 2 × PP 2 for expert
// ones: rank 5 is DP rank 1 of stage 1, and EP rank 1 of expert-DP rank 0, whose experts
// receive the tokens of DP replicas 0 and 1 (the dense ranks 4 and 5 of its EP group).
func Example() {
	l := experttest.Layout{TP: 1, PP: 2, DP: 4, ETP: 1, EP: 2}
	fmt.Println(l)
	fmt.Printf("%+v\n", l.Coord(5))
	fmt.Println(l.Replicas(5))
	// Output:
	// tp1-pp2-dp4-etp1-ep2-edp2
	// {TP:0 DP:1 PP:1 ETP:0 EP:1 EDP:0}
	// [0 1]
}
