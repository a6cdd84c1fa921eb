package tune_test

import (
	"context"
	"fmt"
	"math"
	"os"

	"megago/tune"
)

// quadratic is a SegmentRunner whose validation loss is a formula of the settings: the
// loss falls with the iterations towards (log10(lr)+2.5)².
type quadratic struct{}

func (quadratic) RunSegment(_ context.Context, s tune.Segment) (tune.Outcome, error) {
	lr := s.Settings[0].Value.(float64)
	return tune.Outcome{ValidLoss: math.Pow(math.Log10(lr)+2.5, 2) + 10/float64(s.To)}, nil
}

// A grid of 5 learning rates with successive halving: rungs at 10, 30 and 90
// iterations.
func Example() {
	space, err := tune.ParseSpace([]byte(`{"lr": {"min": 1e-4, "max": 1e-1, "scale": "log", "points": 5}}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	grid, _ := tune.NewGrid(space)
	dir, _ := os.MkdirTemp("", "tune-example")
	defer os.RemoveAll(dir)
	trials, err := tune.Search(context.Background(), tune.Config{Space: space, Sampler: grid,
		Rungs: tune.Rungs(10, 90, 3), Eta: 3, Dir: dir, Runner: quadratic{}, Record: map[string]any{"example": 1}})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, t := range trials {
		fmt.Printf("trial %d: lr %v, %d rungs, %s\n", t.ID, t.Settings[0].Value, len(t.Rungs), t.State)
	}
	// Output:
	// trial 0: lr 0.0001, 1 rungs, stopped
	// trial 1: lr 0.0005623, 1 rungs, stopped
	// trial 2: lr 0.003162, 3 rungs, finished
	// trial 3: lr 0.01778, 1 rungs, stopped
	// trial 4: lr 0.1, 1 rungs, stopped
}
