package report_test

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"megago/examples/internal/report"
)

// The number formats of the progress lines, and a metrics record.
func Example() {
	fmt.Println(report.Thousands(1234567.4), report.Clock(75*time.Second), report.Clock(3725*time.Second))
	b, _ := json.Marshal(report.Record{{Key: "kind", Value: "valid"}, {Key: "iteration", Value: 200},
		{Key: "lm_loss", Value: 4.5}, {Key: "grad_norm", Value: math.Inf(1)}})
	fmt.Println(string(b))
	// Output:
	// 1,234,567 1:15 1:02:05
	// {"kind":"valid","iteration":200,"lm_loss":4.5,"grad_norm":null}
}
