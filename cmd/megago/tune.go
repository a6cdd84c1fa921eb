package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"megago/tune"
)

func init() {
	register(command{
		name:    "tune",
		summary: "search an example's hyperparameters, with early stopping",
		usage: `megago tune --example gpt|bert|t5 (or --program PATH) --space FILE --max-iters R [flags] [-- EXAMPLE FLAGS...]

Tune searches the settings of an example: random, grid or model-based (TPE)
sampling over a search space, early stopping by asynchronous successive
halving (ASHA) on the validation loss, several trials at once, resumable.
The flags after -- are the example's, shared by every trial (the model size,
the data, --eval-iters).

The search space file is a JSON object of the example's flags, each a range or
a list of values:

	{
	  "lr":              {"min": 1e-4, "max": 3e-2, "scale": "log", "points": 4},
	  "lr-warmup-iters": {"min": 0, "max": 30, "type": "int", "points": 3},
	  "weight-decay":    {"values": [0, 0.1, 0.3]}
	}

"scale" is "linear" (the default) or "log", "type" "float" (the default) or
"int"; "points" is the number of grid points of a range (for --sampler grid).
Every problem of the space, and every extreme of it the example refuses
(checked with the example's --check-only), is reported before any trial runs.

--sampler random draws each setting independently (uniformly on its scale,
from a list); grid runs every combination of the ranges' points and the
lists' values; tpe (a Tree-structured Parzen Estimator, multivariate, with
Optuna's TPESampler defaults) draws its first --startup-trials trials as
random does, then learns from the rung results: it ranks the trials that
reached a rung (the deepest rung first, then the loss there), models the
best 10% and the others as two densities l and g over the space, and draws
each new trial as the best l/g of 24 candidates from l. A trial's settings
depend on the seed and the results recorded before it started, so with
--parallel 1 a resumed tpe search still decides what an uninterrupted one
does; every trial's settings are recorded when it starts and replayed.

Every trial trains with --train-iters R (--max-iters), so its learning-rate
schedule is the full run's, and stops at the rungs r, rη, rη², ... < R and R
(--min-iters r, --reduction-factor η), where the example validates and saves
a checkpoint. Of the trials that reached a rung, the best 1/η continue from
their checkpoint; the others stop. When no new trial may start and nothing
runs, the best trial of the deepest rung continues, until one reaches R.
--reduction-factor 1, or --min-iters equal to --max-iters, runs every trial to
R: no early stopping.

Output in --out-dir: tune.jsonl (every decision and result, appended as it
happens), table.txt (the trials ranked: settings, loss at each rung, state,
time), best.json (the best trial's settings with the fixed flags: the example
takes it with --config), curves.png (training loss of every trial),
params.png (each setting against the final validation loss), and each trial's
checkpoints and logs in trials/N/. Run the same command again to resume an
interrupted search: finished segments are not run again, and with --parallel 1
the decisions are those of an uninterrupted search.

Budgets: --max-trials stops starting new trials (promotions go on);
--max-total-iters bounds the training iterations of all trials together (a
new trial or a promotion starts only if it fits with everything decided
before it, so a search can be held to a fraction of a grid's compute);
--max-time stops starting any segment and lets the running ones finish. Ctrl-C
stops the running segments (each after its iteration); run again to resume.

--parallel N runs N segments at once, each process with GOMAXPROCS = cores/N;
--launch M runs each trial as M processes under megago launch (with
GOMAXPROCS = cores/(N·M)).

A 36-point grid of 150 iterations, without early stopping, a random search
of 24 trials with rungs at 17, 51 and 150 iterations, and the same with TPE:

	megago tune --example gpt --space space.json --sampler grid --max-iters 150 \
		--reduction-factor 1 --out-dir grid -- --eval-iters 10
	megago tune --example gpt --space space.json --max-trials 24 --max-iters 150 \
		--min-iters 17 --reduction-factor 3 --out-dir asha -- --eval-iters 10
	megago tune --example gpt --space space.json --sampler tpe --max-trials 24 \
		--max-iters 150 --min-iters 17 --reduction-factor 3 --out-dir tpe -- --eval-iters 10`,
		run: runTune,
	})
}

// tuneFlags are megago tune's settings.
type tuneFlags struct {
	example, program, space, outDir, sampler, metric string
	seed                                             uint64
	maxTrials, maxTotal, parallel, launch, startup   int
	maxTime                                          time.Duration
	minIters, maxIters                               int
	eta                                              float64
}

func runTune(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tune", flag.ContinueOnError)
	var f tuneFlags
	fs.StringVar(&f.example, "example", "", "the example to tune: gpt, bert or t5 (built with go build from the megago module in the current directory)")
	fs.StringVar(&f.program, "program", "", "a program that takes the examples' flags and writes metrics.jsonl, instead of --example")
	fs.StringVar(&f.space, "space", "", "the search space file (JSON)")
	fs.StringVar(&f.outDir, "out-dir", "tune.out", "where the results, the table, best.json, the plots and the trials go")
	fs.StringVar(&f.sampler, "sampler", "random", "random, grid or tpe")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the random and tpe samplers")
	fs.IntVar(&f.startup, "startup-trials", tune.DefaultStartupTrials, "tpe: trials drawn at random before the model")
	fs.IntVar(&f.maxTrials, "max-trials", 0, "trials to start at most (0: a grid's size; random and tpe sampling need this, --max-total-iters or --max-time)")
	fs.IntVar(&f.maxTotal, "max-total-iters", 0, "training iterations of all trials together at most (0: no limit)")
	fs.DurationVar(&f.maxTime, "max-time", 0, "start no segment after this time, e.g. 30m (0: no limit)")
	fs.IntVar(&f.parallel, "parallel", 1, "segments that run at once")
	fs.IntVar(&f.minIters, "min-iters", 0, "the first rung r (0: --max-iters/η², at least 1)")
	fs.Float64Var(&f.eta, "reduction-factor", 3, "η: rungs r, rη, rη², ... and the best 1/η go on (1: no early stopping)")
	fs.IntVar(&f.maxIters, "max-iters", 0, "R: every trial's --train-iters and the last rung")
	fs.IntVar(&f.launch, "launch", 1, "processes per trial, started by megago launch")
	fs.StringVar(&f.metric, "metric", "lm_loss", "the key of the example's \"valid\" record in metrics.jsonl to minimise")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	cfg, prog, err := f.config(fs.Args(), stdout)
	if err != nil {
		return err
	}
	if err := buildExample(ctx, &f, prog); err != nil {
		return err
	}
	if err := prog.Check(ctx, cfg.Space, f.maxIters); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "tune: rungs %v, results in %s\n", cfg.Rungs, f.outDir)
	trials, err := tune.Search(ctx, cfg)
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("interrupted; run the same command again to resume: %w", err)
	}
	if err != nil {
		return err
	}
	return printTable(stdout, trials, cfg)
}

// config checks the flags and returns the search and its program; fixed are the
// example's flags after --.
func (f *tuneFlags) config(fixed []string, log io.Writer) (tune.Config, *tune.Program, error) {
	usage := func(format string, a ...any) (tune.Config, *tune.Program, error) {
		return tune.Config{}, nil, &usageError{fmt.Errorf(format, a...)}
	}
	switch {
	case (f.example == "") == (f.program == ""):
		return usage("give one of --example and --program")
	case f.example != "" && f.example != "gpt" && f.example != "bert" && f.example != "t5":
		return usage("--example %q: want gpt, bert or t5", f.example)
	case f.space == "":
		return usage("--space is required")
	case f.maxIters < 1:
		return usage("--max-iters must be at least 1, got %d", f.maxIters)
	case f.minIters < 0 || f.minIters > f.maxIters:
		return usage("--min-iters must be between 0 and --max-iters %d, got %d", f.maxIters, f.minIters)
	case f.eta < 1:
		return usage("--reduction-factor must be at least 1, got %g", f.eta)
	case f.parallel < 1 || f.launch < 1 || f.maxTrials < 0 || f.maxTotal < 0 || f.maxTime < 0 || f.startup < 0:
		return usage("--parallel and --launch must be at least 1, --max-trials, --max-total-iters, --max-time and --startup-trials not negative")
	}
	if f.minIters == 0 {
		f.minIters = max(1, int(float64(f.maxIters)/(f.eta*f.eta)))
	}
	space, err := tune.ReadSpace(f.space)
	if err != nil {
		return tune.Config{}, nil, err
	}
	sampler, err := tune.NewSampler(f.sampler, space, f.seed, f.startup)
	if err != nil {
		return usage("--sampler: %v", err)
	}
	fixedSettings, err := tune.ParseFixed(fixed)
	if err != nil {
		return usage("the example's flags: %v", err)
	}
	for _, s := range fixedSettings {
		for _, p := range space.Params {
			if p.Flag == s.Flag {
				return usage("--%s is both searched and fixed", s.Flag)
			}
		}
	}
	prog := &tune.Program{Command: []string{f.program}, Fixed: fixed, Dir: f.outDir, Metric: f.metric,
		Env: []string{"GOMAXPROCS=" + strconv.Itoa(max(1, runtime.GOMAXPROCS(0)/(f.parallel*f.launch)))}}
	rungs := tune.Rungs(f.minIters, f.maxIters, f.eta)
	record := map[string]any{"example": f.example, "program": f.program, "space": space.Params, "sampler": f.sampler,
		"seed": f.seed, "rungs": rungs, "reduction_factor": f.eta, "metric": f.metric, "launch": f.launch, "fixed": fixed}
	if f.sampler == "tpe" { // only there: the results files of random and grid searches stay resumable
		record["startup_trials"] = f.startup
	}
	cfg := tune.Config{Space: space, Sampler: sampler, Rungs: rungs, Eta: f.eta, MaxTrials: f.maxTrials, MaxIterations: f.maxTotal,
		MaxTime: f.maxTime, Parallel: f.parallel, Dir: f.outDir, Runner: prog, Fixed: fixedSettings, Log: log, Record: record}
	return cfg, prog, nil
}

// buildExample builds --example into OUT-DIR/bin (from the megago module in the
// current directory) and sets the program's command, under megago launch with
// --launch.
func buildExample(ctx context.Context, f *tuneFlags, prog *tune.Program) error {
	if f.example != "" {
		bin, err := filepath.Abs(filepath.Join(f.outDir, "bin", f.example))
		if err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "megago/examples/"+f.example)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building the %s example (run megago tune in the megago module, or build it and give --program): %v\n%s", f.example, err, out)
		}
		prog.Command = []string{bin}
	}
	if f.launch > 1 {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		prog.Command = append([]string{self, "launch", "-n", strconv.Itoa(f.launch), "--"}, prog.Command...)
	}
	return nil
}

// printTable prints the ranked table and where the best settings are.
func printTable(w io.Writer, trials []tune.TrialResult, cfg tune.Config) error {
	if err := tune.WriteTable(w, trials, cfg.Space.Axes()); err != nil {
		return err
	}
	ranked := tune.Rank(trials)
	if len(ranked) == 0 || len(ranked[0].Rungs) == 0 {
		return errors.New("no trial reached a rung: see the trials' logs in " + filepath.Join(cfg.Dir, "trials"))
	}
	fmt.Fprintf(w, "best: trial %d, validation loss %.4f at iteration %d; its settings: %s\n", ranked[0].ID,
		ranked[0].Final, ranked[0].Rungs[len(ranked[0].Rungs)-1].Iteration, filepath.Join(cfg.Dir, tune.BestFile))
	return nil
}
