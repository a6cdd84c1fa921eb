package tune_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"

	"megago/tune"
)

// The table of a search's trials, best first, and the best trial's settings written
// as the --config file of the example.
func ExampleWriteTable() {
	trials := []tune.TrialResult{
		{ID: 1, State: "stopped", Rungs: []tune.RungLoss{{Iteration: 50, ValidLoss: 4.61}}, Final: 4.61, Seconds: 21,
			Settings: []tune.Setting{{Flag: "lr", Value: 0.0001}, {Flag: "lr-warmup-iters", Value: int64(10)}}},
		{ID: 2, State: "finished", Rungs: []tune.RungLoss{{Iteration: 50, ValidLoss: 4.02}, {Iteration: 150, ValidLoss: 3.37}},
			Final: 3.37, Seconds: 64, Settings: []tune.Setting{{Flag: "lr", Value: 0.003}, {Flag: "lr-warmup-iters", Value: int64(40)}}},
		{ID: 3, State: "failed", Final: math.NaN(), Seconds: 2, Err: "loss is NaN at iteration 12",
			Settings: []tune.Setting{{Flag: "lr", Value: 0.1}, {Flag: "lr-warmup-iters", Value: int64(0)}}},
	}
	axes := []tune.Axis{{Flag: "lr", Log: true}, {Flag: "lr-warmup-iters"}}
	if err := tune.WriteTable(os.Stdout, trials, axes); err != nil {
		fmt.Println(err)
	}

	dir, err := os.MkdirTemp("", "tune-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "best.json")
	best := tune.Rank(trials)[0]
	if err := tune.WriteConfig(path, best, []tune.Setting{{Flag: "train-iters", Value: int64(150)}}); err != nil {
		fmt.Println(err)
		return
	}
	b, _ := os.ReadFile(path)
	fmt.Print(string(b))
	// Output:
	// rank  trial      lr  lr-warmup-iters  loss@50  loss@150  state      time  error
	//    1      2   0.003               40   4.0200    3.3700  finished  1m04s
	//    2      1  0.0001               10   4.6100            stopped   21.0s
	//    -      3     0.1                0                     failed     2.0s  loss is NaN at iteration 12
	// {
	//   "train-iters": 150,
	//   "lr": 0.003,
	//   "lr-warmup-iters": 40
	// }
}
