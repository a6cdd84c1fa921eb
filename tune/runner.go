package tune

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"megago/internal/atomicfile"
	"megago/internal/ckptlayout"
	"megago/internal/filelock"
)

// Segment is a piece of a trial's training: from the previous rung's iteration (or the
// start) to the next rung's.
type Segment struct {
	Trial    int
	Settings []Setting
	Rung     int // the index of the rung it runs to
	From     int // the previous rung's iteration, whose checkpoint it resumes; 0: the start
	To       int // the rung's iteration, where it validates and stops
	MaxIters int // the last rung's iteration: the trial's --train-iters, so its LR schedule is the full run's
}

// Outcome is what a segment gave.
type Outcome struct {
	ValidLoss float64 // at iteration To
	Curve     []Point // training loss of iterations From+1, ..., To
}

// A SegmentRunner runs trial segments; Program runs them as processes of an example.
// RunSegment may be called from several goroutines at once, for different trials.
type SegmentRunner interface {
	RunSegment(ctx context.Context, s Segment) (Outcome, error)
}

// Program runs segments as processes of a program that takes the examples' flags
// (examples/gpt, bert, t5). Trial N keeps its checkpoints in Dir/trials/N/ckpt (the
// example's --save, and from the second segment its --load) and each segment's output
// in Dir/trials/N/rung-K (its --out-dir, with metrics.jsonl and log.txt: the process's
// stdout and stderr). A segment to rung K runs
//
//	Command... Fixed... SETTINGS... --train-iters MaxIters [--exit-interval To]
//	    --save Dir/trials/N/ckpt [--load Dir/trials/N/ckpt] --out-dir Dir/trials/N/rung-K
//
// and reads the loss from the "valid" record of iteration To in metrics.jsonl. Before
// it starts, the checkpoint directory is rolled back to iteration From (later
// checkpoints, left by a segment that was interrupted, are removed), so a segment run
// again after a crash resumes where the first attempt did.
type Program struct {
	Command []string // the program, and the arguments of a launcher before it: megago launch -n 2 -- ./gpt
	Fixed   []string // the example's flags that every trial shares
	Env     []string // added to each process's environment ("GOMAXPROCS=4")
	Dir     string   // the search's output directory
	Metric  string   // the key of the "valid" record that is the loss ("lm_loss")
}

// RunSegment runs s as a process; see Program. When ctx ends, the process is sent
// SIGTERM (the examples stop after their iteration) and killed a minute later.
func (p *Program) RunSegment(ctx context.Context, s Segment) (Outcome, error) {
	trial := filepath.Join(p.Dir, "trials", strconv.Itoa(s.Trial))
	ckpt := filepath.Join(trial, "ckpt")
	out := filepath.Join(trial, fmt.Sprintf("rung-%d", s.Rung))
	if err := waitUnlocked(ctx, ckpt); err != nil {
		return Outcome{}, err
	}
	if err := rollback(ckpt, s.From); err != nil {
		return Outcome{}, err
	}
	if err := os.RemoveAll(out); err != nil {
		return Outcome{}, err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return Outcome{}, err
	}
	args := append(append([]string{}, p.Fixed...), Args(s.Settings)...)
	args = append(args, "--train-iters", strconv.Itoa(s.MaxIters), "--save", ckpt, "--out-dir", out)
	if s.To < s.MaxIters {
		args = append(args, "--exit-interval", strconv.Itoa(s.To))
	}
	if s.From > 0 {
		args = append(args, "--load", ckpt)
	}
	logPath := filepath.Join(out, "log.txt")
	if err := p.run(ctx, args, logPath); err != nil {
		return Outcome{}, err
	}
	if ctx.Err() != nil { // stopped, perhaps after a save (--exit-signal-handler) short of To
		return Outcome{}, ctx.Err()
	}
	o, err := readOutcome(filepath.Join(out, "metrics.jsonl"), p.Metric, s.From, s.To)
	if err != nil {
		return Outcome{}, fmt.Errorf("%w (log: %s)", err, logPath)
	}
	return o, nil
}

// run runs the program with the example's flags args, its output going to logPath.
func (p *Program) run(ctx context.Context, args []string, logPath string) error {
	log, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer log.Close()
	fmt.Fprintf(log, "%s\n", strings.Join(append(append([]string{}, p.Command...), args...), " "))
	cmd := p.command(ctx, args)
	cmd.Stdout, cmd.Stderr = log, log
	runtime.LockOSThread() // the parent-death signal follows the thread that started the process
	defer runtime.UnlockOSThread()
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %s (log: %s)", err, lastLine(logPath), logPath)
	}
	return nil
}

// command returns the process of the program with the example's flags args.
func (p *Program) command(ctx context.Context, args []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, p.Command[0], append(p.Command[1:len(p.Command):len(p.Command)], args...)...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	stopWithParent(cmd) // a search killed (SIGKILL) leaves no trial running
	cmd.WaitDelay = time.Minute
	return cmd
}

// lastLine returns the last line of the file at path that is not blank.
func lastLine(path string) string {
	b, _ := os.ReadFile(path) // best effort: for an error message
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// Check runs the program once with the fixed flags and --check-only, then once per
// extreme of each flag of s (Param.Extremes), and returns an error naming every flag
// and value the program refuses, before any trial runs.
func (p *Program) Check(ctx context.Context, s *Space, maxIters int) error {
	base := append(append([]string{}, p.Fixed...), "--train-iters", strconv.Itoa(maxIters), "--check-only")
	if out, err := p.command(ctx, base).CombinedOutput(); err != nil {
		return fmt.Errorf("the program refuses the fixed flags %q: %s", strings.Join(p.Fixed, " "), firstError(out, err))
	}
	var problems []string
	for _, prm := range s.Params {
		last := "" // the flag's previous refusal: an unknown flag is refused once
		for _, v := range prm.Extremes() {
			args := append(append([]string{}, base...), Args([]Setting{{Flag: prm.Flag, Value: v}})...)
			out, err := p.command(ctx, args).CombinedOutput()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if why := firstError(out, err); err != nil && why != last {
				problems = append(problems, fmt.Sprintf("--%s: the program refuses %s: %s", prm.Flag, FormatValue(v), why))
				last = why
			}
		}
	}
	if err := problemsError(problems); err != nil {
		return fmt.Errorf("search space: %w", err)
	}
	return nil
}

// firstError returns the first line of a refused check's output that is not blank,
// or err.
func firstError(out []byte, err error) string {
	for line := range strings.SplitSeq(string(out), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return err.Error()
}

// waitUnlocked waits until no process holds the job lock of the checkpoint directory
// dir: a trial's process left running by a search that was killed stops after its
// iteration (stopWithParent), and the segment must not start before.
func waitUnlocked(ctx context.Context, dir string) error {
	path := filepath.Join(dir, ckptlayout.JobLockFile)
	for {
		if _, err := os.Stat(path); err != nil {
			return nil // no lock file: no job ever ran there
		}
		l, err := filelock.Acquire(path)
		if err == nil {
			return l.Release()
		}
		if !errors.Is(err, filelock.ErrLocked) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// rollback makes the checkpoint directory dir resume at iteration from: it removes
// checkpoints after from and before it (neither is needed again) and points
// latest_checkpointed_iteration.txt at from; with from 0 it removes dir. It returns an
// error when from's checkpoint is missing.
func rollback(dir string, from int) error {
	if from == 0 {
		return os.RemoveAll(dir)
	}
	keep := ckptlayout.IterDir(from)
	if _, err := os.Stat(filepath.Join(dir, keep)); err != nil {
		return fmt.Errorf("the checkpoint of iteration %d to resume: %w", from, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "iter_") && e.IsDir() && e.Name() != keep {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return atomicfile.WriteFile(filepath.Join(dir, ckptlayout.TrackerFile), []byte(strconv.Itoa(from)))
}

// readOutcome reads a segment's metrics.jsonl: the "valid" record of iteration to
// (its key metric) and the training losses ("lm_loss", or "loss") after from.
func readOutcome(path, metric string, from, to int) (Outcome, error) {
	f, err := os.Open(path)
	if err != nil {
		return Outcome{}, err
	}
	defer f.Close()
	o := Outcome{}
	found := false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return Outcome{}, fmt.Errorf("%s: %w", path, err)
		}
		it, _ := rec["iteration"].(float64)
		switch rec["kind"] {
		case "train":
			if loss, ok := trainLoss(rec); ok && int(it) > from {
				o.Curve = append(o.Curve, Point{Iteration: int(it), Loss: loss})
			}
		case "valid":
			if int(it) != to {
				continue
			}
			v, ok := rec[metric]
			if !ok {
				return Outcome{}, fmt.Errorf("%s: the validation record of iteration %d has no %q", path, to, metric)
			}
			x, _ := v.(float64) // null: not finite
			if v == nil {
				x = math.NaN()
			}
			o.ValidLoss, found = x, true
		}
	}
	if err := sc.Err(); err != nil {
		return Outcome{}, err
	}
	if !found {
		return Outcome{}, fmt.Errorf("%s: no validation at iteration %d (is --eval-iters 0?)", path, to)
	}
	return o, nil
}

// trainLoss returns a "train" record's loss: its "lm_loss", else its "loss".
func trainLoss(rec map[string]any) (float64, bool) {
	for _, k := range []string{"lm_loss", "loss"} {
		if x, ok := rec[k].(float64); ok {
			return x, true
		}
	}
	return 0, false
}

// ParseFixed returns the settings that fixed flags give ("--flag value", "--flag=value",
// a bare "--flag" as true; the words after a list flag joined by spaces), each value an
// int64, float64, bool or string as it reads. It returns an error for a word that is
// not a flag's and for flags the search sets itself.
func ParseFixed(args []string) ([]Setting, error) {
	var out []Setting
	var problems []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || isNumber(a) {
			return nil, fmt.Errorf("fixed flags: %q is not a flag", a)
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		name = FlagName(name)
		if why, ok := reserved[name]; ok {
			problems = append(problems, fmt.Sprintf("--%s: %s", name, why))
		}
		var words []string
		for !hasVal && i+1 < len(args) && (!strings.HasPrefix(args[i+1], "-") || isNumber(args[i+1])) {
			words = append(words, args[i+1])
			i++
		}
		switch {
		case hasVal:
		case len(words) == 0:
			val = "true"
		default:
			val = strings.Join(words, " ")
		}
		out = append(out, Setting{Flag: name, Value: parseWord(val)})
	}
	if err := problemsError(problems); err != nil {
		return nil, err
	}
	return out, nil
}

// isNumber reports whether s reads as a number ("-1", "1e-3").
func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

// parseWord returns a command-line word as an int64, float64 or bool where it reads as
// one, else the string.
func parseWord(s string) any {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n
	}
	if x, err := strconv.ParseFloat(s, 64); err == nil {
		return x
	}
	if b, err := strconv.ParseBool(s); err == nil && (s == "true" || s == "false") {
		return b
	}
	return s
}
