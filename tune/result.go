package tune

// Setting is one example flag and its value, as a trial runs with it: Flag is the
// flag's name without dashes ("lr", "lr-warmup-iters"), Value a float64, int64, string
// or bool.
type Setting struct {
	Flag  string
	Value any
}

// RungLoss is a trial's validation loss at a rung: the iteration the rung ends at.
type RungLoss struct {
	Iteration int
	ValidLoss float64
}

// Point is one iteration's training loss, from a trial's metrics.jsonl.
type Point struct {
	Iteration int
	Loss      float64
}

// TrialResult is what a search knows of one trial: its settings, the validation loss
// at each rung it reached, its training-loss curve, how it ended and how long it ran.
type TrialResult struct {
	ID       int
	Settings []Setting  // in the search space's flag order
	Rungs    []RungLoss // the validation loss at each rung reached, in order
	Curve    []Point    // the training-loss curve over all its segments, by iteration
	State    string     // "finished", "stopped" (by early stopping), "failed" or "running"
	Final    float64    // the validation loss at the last rung reached; NaN if none
	Seconds  float64    // wall time over all its segments
	Err      string     // why it failed
}

// The states of a trial.
const (
	StateFinished = "finished"
	StateStopped  = "stopped"
	StateFailed   = "failed"
	StateRunning  = "running"
)

// Axis is a searched flag and whether its values are drawn on a log scale.
type Axis struct {
	Flag string
	Log  bool
}
