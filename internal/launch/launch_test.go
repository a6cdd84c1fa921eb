package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// helperEnv names what TestHelperProcess does when Run's tests start this test binary.
const helperEnv = "LAUNCH_TEST_HELPER"

// slow is how long helper processes that should be stopped would otherwise run.
const slow = 60 * time.Second

// TestHelperProcess is not a test: it is the program the tests below launch.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("runs only as a process started by the launch tests")
	}
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	switch mode {
	case "env":
		for _, k := range []string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "MEGAGO_JOB_TOKEN", "EXTRA"} {
			fmt.Printf("%s=%s\n", k, os.Getenv(k))
		}
	case "lines":
		// Lines written in small pieces from two goroutines, to stdout and stderr.
		var wg sync.WaitGroup
		for _, f := range []*os.File{os.Stdout, os.Stderr} {
			wg.Go(func() {
				for i := range 200 {
					line := []byte(fmt.Sprintf("line %d %d %s\n", rank, i, strings.Repeat("x", i%50)))
					for len(line) > 0 {
						n := min(7, len(line))
						f.Write(line[:n])
						line = line[n:]
					}
				}
			})
		}
		wg.Wait()
		fmt.Printf("tail %d", rank) // no final newline
	case "fail":
		if rank == 1 {
			time.Sleep(100 * time.Millisecond)
			os.Exit(3)
		}
		time.Sleep(slow)
	case "signal":
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, os.Interrupt)
		fmt.Println("ready")
		fmt.Printf("got %v\n", <-ch)
	case "stubborn":
		signal.Ignore(syscall.SIGTERM, os.Interrupt)
		fmt.Println("ready")
		time.Sleep(slow)
	}
	os.Exit(0)
}

// helper returns a Config that runs n helper processes in mode.
func helper(n int, mode string) Config {
	return Config{N: n, ExtraEnv: []string{helperEnv + "=" + mode}}
}

// runHelper runs the helper processes of cfg and returns their stdout and stderr.
func runHelper(ctx context.Context, t *testing.T, cfg Config) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer // Run writes under a lock of its own
	err = Run(ctx, cfg, os.Args[0], []string{"-test.run=^TestHelperProcess$"}, &out, &errOut)
	return out.String(), errOut.String(), err
}

// prefixed parses "[rank N] KEY=VALUE" lines into a map per rank.
func prefixed(t *testing.T, out string) map[int]map[string]string {
	t.Helper()
	re := regexp.MustCompile(`^\[rank (\d+)\] (\w+)=(.*)$`)
	vars := map[int]map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("unexpected output line %q", line)
		}
		r, _ := strconv.Atoi(m[1])
		if vars[r] == nil {
			vars[r] = map[string]string{}
		}
		vars[r][m[2]] = m[3]
	}
	return vars
}

func TestRunSetsEnvironment(t *testing.T) {
	cfg := helper(3, "env")
	cfg.ExtraEnv = append(cfg.ExtraEnv, "EXTRA=yes")
	out, _, err := runHelper(context.Background(), t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	vars := prefixed(t, out)
	port, token := vars[0]["MASTER_PORT"], vars[0]["MEGAGO_JOB_TOKEN"]
	if p, err := strconv.Atoi(port); err != nil || p <= 0 {
		t.Errorf("MASTER_PORT=%q", port)
	}
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(token) {
		t.Errorf("MEGAGO_JOB_TOKEN=%q, want 32 hex digits", token)
	}
	for r := range 3 {
		want := map[string]string{"RANK": strconv.Itoa(r), "WORLD_SIZE": "3", "LOCAL_RANK": strconv.Itoa(r),
			"LOCAL_WORLD_SIZE": "3", "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
			"MEGAGO_JOB_TOKEN": token, "EXTRA": "yes"}
		for k, v := range want {
			if vars[r][k] != v {
				t.Errorf("rank %d: %s=%q, want %q", r, k, vars[r][k], v)
			}
		}
	}
}

func TestRunMultiNodeEnvironment(t *testing.T) {
	cfg := helper(2, "env")
	cfg.NNodes, cfg.NodeRank, cfg.MasterAddr, cfg.MasterPort, cfg.Token = 3, 1, "10.1.2.3", 29500, "shared"
	out, _, err := runHelper(context.Background(), t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	vars := prefixed(t, out)
	for local, rank := range []int{2, 3} {
		want := map[string]string{"RANK": strconv.Itoa(rank), "WORLD_SIZE": "6", "LOCAL_RANK": strconv.Itoa(local),
			"LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1", "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29500",
			"MEGAGO_JOB_TOKEN": "shared"}
		for k, v := range want {
			if vars[rank][k] != v {
				t.Errorf("rank %d: %s=%q, want %q", rank, k, vars[rank][k], v)
			}
		}
	}
}

// TestRunPrefixesWholeLines: lines written in pieces by three processes, each to stdout
// and stderr at once, come out whole, prefixed, none lost.
func TestRunPrefixesWholeLines(t *testing.T) {
	stdout, stderr, err := runHelper(context.Background(), t, helper(3, "lines"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`^\[rank (\d)\] (line (\d) \d+ x*|tail (\d))$`)
	for name, out := range map[string]string{"stdout": stdout, "stderr": stderr} {
		count := map[string]int{}
		for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			m := re.FindStringSubmatch(line)
			if m == nil || (m[3] != m[1] && m[4] != m[1]) {
				t.Fatalf("%s: malformed line %q", name, line)
			}
			count[m[1]]++
		}
		for r := range 3 {
			want := 200
			if name == "stdout" {
				want++ // the tail
			}
			if got := count[strconv.Itoa(r)]; got != want {
				t.Errorf("%s: %d lines from rank %d, want %d", name, got, r, want)
			}
		}
	}
}

// TestRunStopsTheRestOnFailure: when rank 1 exits with status 3, the others (which would
// run for a minute) are stopped and Run reports rank 1.
func TestRunStopsTheRestOnFailure(t *testing.T) {
	start := time.Now()
	_, _, err := runHelper(context.Background(), t, helper(3, "fail"))
	var ee *ExitError
	var xe *exec.ExitError
	if !errors.As(err, &ee) || ee.Rank != 1 || !errors.As(err, &xe) || xe.ExitCode() != 3 {
		t.Fatalf("Run = %v, want rank 1's exit status 3", err)
	}
	if !strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("error %q does not name the rank and status", err)
	}
	if d := time.Since(start); d > slow/2 {
		t.Errorf("Run took %v: the other ranks were not stopped", d)
	}
}

// readyWriter collects output and closes ready once want lines say "ready".
type readyWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	want  int
	ready chan struct{}
	once  sync.Once
}

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Count(w.buf.String(), "] ready\n") >= w.want {
		w.once.Do(func() { close(w.ready) })
	}
	return len(p), nil
}

func (w *readyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// launchReady starts Run in the background and waits until every process is ready.
func launchReady(t *testing.T, ctx context.Context, cfg Config) (*readyWriter, chan error) {
	t.Helper()
	w := &readyWriter{want: cfg.N, ready: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, os.Args[0], []string{"-test.run=^TestHelperProcess$"}, w, w) }()
	select {
	case <-w.ready:
	case err := <-done:
		t.Fatalf("Run returned early: %v\n%s", err, w.String())
	}
	return w, done
}

func TestRunForwardsSignals(t *testing.T) {
	sigs := make(chan os.Signal, 1)
	cfg := helper(2, "signal")
	cfg.Signals = sigs
	w, done := launchReady(t, context.Background(), cfg)
	sigs <- os.Interrupt
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "interrupted by interrupt") {
		t.Errorf("Run = %v, want an interruption error", err)
	}
	for r := range 2 {
		if want := fmt.Sprintf("[rank %d] got interrupt\n", r); !strings.Contains(w.String(), want) {
			t.Errorf("no %q in the output:\n%s", want, w.String())
		}
	}
}

// TestRunKillsAfterGrace: processes that ignore SIGTERM are killed once the grace
// period has passed after ctx ends.
func TestRunKillsAfterGrace(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cfg := helper(2, "stubborn")
	cfg.Grace = 200 * time.Millisecond
	_, done := launchReady(t, ctx, cfg)
	start := time.Now()
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > slow/2 {
		t.Errorf("Run took %v after the cancellation", d)
	}
}

func TestRunStartFailure(t *testing.T) {
	err := Run(context.Background(), Config{N: 2}, "/nonexistent/program", nil, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "starting rank 0") {
		t.Errorf("Run = %v, want a start error", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		mention string // "" for a valid config
	}{
		{"one host", Config{N: 4}, ""},
		{"several hosts", Config{N: 4, NNodes: 2, NodeRank: 1, MasterAddr: "h", MasterPort: 1, Token: "t"}, ""},
		{"no processes", Config{}, "0 processes"},
		{"node rank too big", Config{N: 1, NNodes: 2, NodeRank: 2}, "node rank 2"},
		{"bad port", Config{N: 1, MasterPort: 70000}, "port 70000"},
		{"negative grace", Config{N: 1, Grace: -1}, "grace"},
		{"several hosts, no address", Config{N: 1, NNodes: 2, MasterPort: 1, Token: "t"}, "master address"},
		{"several hosts, no port", Config{N: 1, NNodes: 2, MasterAddr: "h", Token: "t"}, "master port"},
		{"several hosts, no token", Config{N: 1, NNodes: 2, MasterAddr: "h", MasterPort: 1}, "MEGAGO_JOB_TOKEN"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			switch {
			case tc.mention == "" && err != nil:
				t.Errorf("Validate() = %v", err)
			case tc.mention != "" && (err == nil || !strings.Contains(err.Error(), tc.mention)):
				t.Errorf("Validate() = %v, want an error mentioning %q", err, tc.mention)
			}
		})
	}
}

func TestPrefixWriter(t *testing.T) {
	var mu sync.Mutex
	var out bytes.Buffer
	w := &prefixWriter{mu: &mu, w: &out, prefix: "[p] "}
	for _, s := range []string{"a", "b\nc", "\n\n", "d\ne\nf"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got, want := out.String(), "[p] ab\n[p] c\n[p] \n[p] d\n[p] e\n"; got != want {
		t.Errorf("before Flush: %q, want %q", got, want)
	}
	w.Flush()
	if got, want := out.String(), "[p] ab\n[p] c\n[p] \n[p] d\n[p] e\n[p] f\n"; got != want {
		t.Errorf("after Flush: %q, want %q", got, want)
	}

	out.Reset()
	w.Write(bytes.Repeat([]byte("y"), maxLine+10))
	w.Write([]byte("\n"))
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 || len(lines[0]) != len("[p] ")+maxLine || lines[1] != "[p] "+strings.Repeat("y", 10) {
		t.Errorf("a line longer than %d bytes: got %d lines of lengths %d...", maxLine, len(lines), len(lines[0]))
	}
}

func ExampleRun() {
	// One process on this host, printing variables that megago programs read.
	cfg := Config{N: 1, MasterPort: 29511, Token: "example"}
	err := Run(context.Background(), cfg, "sh", []string{"-c", "echo rank $RANK of $WORLD_SIZE, master $MASTER_ADDR:$MASTER_PORT"}, os.Stdout, os.Stderr)
	fmt.Println("error:", err)
	// Output:
	// [rank 0] rank 0 of 1, master 127.0.0.1:29511
	// error: <nil>
}
