package tune

import (
	"encoding/json"
	"flag"
	"fmt"
	"megago/internal/ckptlayout"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// fakeEnv makes the test binary run fakeProgram instead of the tests: a program that
// takes the examples' flags a search sets (and --lr, --wd, --num-layers, --sleep) and
// writes metrics.jsonl and checkpoints as the examples do, its losses those of formula.
const fakeEnv = "MEGAGO_TUNE_FAKE_PROGRAM"

func TestMain(m *testing.M) {
	if os.Getenv(fakeEnv) == "1" {
		os.Exit(fakeProgram(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeProgram is the fake example: it trains from --load's latest checkpoint (or 0) to
// the first multiple of --exit-interval or --train-iters, writing a "train" record per
// iteration and a "valid" record and a checkpoint where it stops. On SIGTERM it stops
// after its iteration, saving it with --exit-signal-handler, as the examples do.
func fakeProgram(args []string) int {
	fs := flag.NewFlagSet("fake", flag.ContinueOnError)
	lr := fs.Float64("lr", 1e-3, "")
	wd := fs.Float64("wd", 0, "")
	fs.Int("num-layers", 2, "")
	iters := fs.Int("train-iters", 10, "")
	exit := fs.Int("exit-interval", 0, "")
	save, load, out := fs.String("save", "", ""), fs.String("load", "", ""), fs.String("out-dir", "", "")
	check, handler := fs.Bool("check-only", false, ""), fs.Bool("exit-signal-handler", false, "")
	sleep := fs.Duration("sleep", 0, "time per iteration")
	if err := fs.Parse(args); err != nil {
		return 1 // the flag package printed why
	}
	if *lr <= 0 {
		fmt.Fprintf(os.Stderr, "fake: --lr must be positive, got %g\n", *lr)
		return 1
	}
	if *check {
		fmt.Println("settings ok")
		return 0
	}
	var term atomic.Bool
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	go func() { <-sigs; term.Store(true) }()
	if err := fakeTrain(*lr, *wd, *iters, *exit, *save, *load, *out, *handler, *sleep, &term); err != nil {
		fmt.Fprintln(os.Stderr, "fake:", err)
		return 1
	}
	return 0
}

// fakeTrain is fakeProgram's loop.
func fakeTrain(lr, wd float64, iters, exit int, save, load, out string, handler bool, sleep time.Duration, term *atomic.Bool) error {
	start := 0
	if load != "" {
		b, err := os.ReadFile(filepath.Join(load, ckptlayout.TrackerFile))
		if err != nil {
			return err
		}
		if start, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			return err
		}
	}
	f, err := os.Create(filepath.Join(out, "metrics.jsonl"))
	if err != nil {
		return err
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	settings := []Setting{{"lr", lr}, {"wd", wd}}
	for it := start + 1; it <= iters; it++ {
		time.Sleep(sleep)
		if err := enc.Encode(map[string]any{"kind": "train", "iteration": it, "lm_loss": formulaLoss(settings, it) + 0.5}); err != nil {
			return err
		}
		stop := it == iters || exit > 0 && it%exit == 0
		if term.Load() && !stop {
			if handler {
				return fakeSave(save, it)
			}
			return nil
		}
		if stop {
			if err := fakeSave(save, it); err != nil {
				return err
			}
			return enc.Encode(map[string]any{"kind": "valid", "iteration": it, "lm_loss": formulaLoss(settings, it)})
		}
	}
	return nil
}

// fakeSave writes a checkpoint of iteration it in dir: its directory and the tracker.
func fakeSave(dir string, it int) error {
	if err := os.MkdirAll(filepath.Join(dir, ckptlayout.IterDir(it)), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ckptlayout.TrackerFile), []byte(strconv.Itoa(it)), 0o644)
}
