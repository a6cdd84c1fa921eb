package tune

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRungs(t *testing.T) {
	tests := []struct {
		min, max int
		eta      float64
		want     []int
	}{
		{10, 150, 3, []int{10, 30, 90, 150}},
		{17, 150, 3, []int{17, 51, 150}}, // 153 ≥ 150
		{1, 8, 2, []int{1, 2, 4, 8}},
		{10, 100, 1.5, []int{10, 15, 23, 34, 51, 76, 100}}, // 22.5, 33.75, 50.6, 75.9 rounded
		{150, 150, 3, []int{150}},
		{10, 150, 1, []int{150}}, // η = 1: no early stopping
		{0, 150, 3, []int{150}},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, Rungs(tt.min, tt.max, tt.eta), "Rungs(%d, %d, %g)", tt.min, tt.max, tt.eta)
	}
}

// step is one call on an ASHA: start, promote, report, fail, or ask next/drain with
// the answer expected (-1: none).
type step struct {
	op   string
	id   int
	rung int
	loss float64
}

func TestASHA(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name  string
		rungs int
		eta   float64
		steps []step
	}{
		{"promote the best third", 3, 3, []step{
			{op: "start", id: 0}, {op: "start", id: 1}, {op: "start", id: 2},
			{op: "report", id: 0, loss: 5}, {op: "next", id: -1}, // 1 reached rung 0: ⌊1/3⌋ = 0
			{op: "report", id: 1, loss: 3}, {op: "next", id: -1},
			{op: "report", id: 2, loss: 4}, {op: "next", id: 1}, // ⌊3/3⌋ = 1: trial 1 (3)
			{op: "promote", id: 1}, {op: "next", id: -1}, // trial 1 runs; rung 1 has nobody
			{op: "start", id: 3}, {op: "report", id: 3, loss: 1}, {op: "next", id: 3}, // the best of 4 is new
			{op: "promote", id: 3},
			{op: "report", id: 1, rung: 1, loss: 2}, {op: "next", id: -1}, // rung 1: 1 trial, ⌊1/3⌋ = 0
			{op: "report", id: 3, rung: 1, loss: 0.5}, {op: "next", id: -1},
			{op: "drain", id: 3}, // the best of the deepest rung goes to the last
			{op: "promote", id: 3}, {op: "report", id: 3, rung: 2, loss: 0.1},
			{op: "drain", id: -1}, // a trial reached the last rung
		}},
		{"ties by id, the deepest rung first", 3, 2, []step{
			{op: "start", id: 0}, {op: "start", id: 1}, {op: "start", id: 2}, {op: "start", id: 3},
			{op: "report", id: 1, loss: 2}, {op: "report", id: 0, loss: 2}, {op: "next", id: 0},
			{op: "promote", id: 0}, {op: "report", id: 2, loss: 7}, {op: "report", id: 3, loss: 8},
			{op: "next", id: 1}, {op: "promote", id: 1},
			{op: "report", id: 0, rung: 1, loss: 1}, {op: "report", id: 1, rung: 1, loss: 1.5},
			{op: "next", id: 0}, // rung 1's ⌊2/2⌋ = 1 before rung 0's (whose quota of 2 is used)
		}},
		{"not finite never promoted", 2, 2, []step{
			{op: "start", id: 0}, {op: "start", id: 1}, {op: "start", id: 2}, {op: "start", id: 3},
			{op: "report", id: 0, loss: nan}, {op: "report", id: 1, loss: math.Inf(1)},
			{op: "report", id: 2, loss: nan}, {op: "report", id: 3, loss: nan},
			{op: "next", id: -1}, {op: "drain", id: -1},
		}},
		{"failed trials count, never promoted", 2, 2, []step{
			{op: "start", id: 0}, {op: "start", id: 1}, {op: "start", id: 2},
			{op: "report", id: 0, loss: 1}, {op: "report", id: 1, loss: 2},
			{op: "next", id: 0}, {op: "promote", id: 0}, {op: "fail", id: 0}, // failed on the way to rung 1
			{op: "fail", id: 2},
			{op: "next", id: -1}, // ⌊2/2⌋ = 1: trial 0, which failed
			{op: "drain", id: 1},
		}},
		{"one rung: no early stopping", 1, 3, []step{
			{op: "start", id: 0}, {op: "start", id: 1}, {op: "start", id: 2},
			{op: "report", id: 0, loss: 1}, {op: "report", id: 1, loss: 2}, {op: "report", id: 2, loss: 3},
			{op: "next", id: -1}, {op: "drain", id: -1},
		}},
		{"η = 1 promotes nothing by Next", 2, 1, []step{
			{op: "start", id: 0}, {op: "report", id: 0, loss: 1}, {op: "next", id: -1}, {op: "drain", id: 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewASHA(tt.rungs, tt.eta)
			for i, s := range tt.steps {
				switch s.op {
				case "start":
					a.Start(s.id)
				case "promote":
					a.Promote(s.id)
				case "report":
					a.Report(s.id, s.rung, s.loss)
				case "fail":
					a.Fail(s.id)
				case "next", "drain":
					f := a.Next
					if s.op == "drain" {
						f = a.Drain
					}
					id, ok := f()
					if !ok {
						id = -1
					}
					assert.Equal(t, s.id, id, "step %d: %s", i, s.op)
				}
			}
		})
	}
}

func TestASHAPanicsOnMisuse(t *testing.T) {
	a := NewASHA(2, 3)
	a.Start(0)
	assert.Panics(t, func() { a.Start(0) }, "started twice")
	assert.Panics(t, func() { a.Promote(0) }, "running")
	assert.Panics(t, func() { a.Report(0, 1, 1) }, "wrong rung")
	a.Report(0, 0, 1)
	assert.Panics(t, func() { a.Fail(0) }, "not running")
}
