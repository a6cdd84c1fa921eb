package launch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Config describes the processes Run starts.
type Config struct {
	N        int // processes on this host (torchrun's --nproc-per-node), ≥ 1
	NNodes   int // hosts in the job; 0 means 1
	NodeRank int // this host's index, in [0, NNodes)

	// MasterAddr and MasterPort are where rank 0 listens. With one host, "" means
	// 127.0.0.1 and 0 a free port; with several, both are required and MasterAddr must
	// name node 0 so that every host can reach it.
	MasterAddr string
	MasterPort int

	// Token is the job token. With one host "" means a random one; with several it is
	// required and must be the same on every host.
	Token string

	// ExtraEnv holds KEY=VALUE pairs added to every process's environment, after the
	// launcher's own and before the variables above.
	ExtraEnv []string

	// Grace is how long processes may take to exit after SIGTERM (or a forwarded signal)
	// before they are killed; 0 means 5 s.
	Grace time.Duration

	// Signals, when not nil, delivers signals to forward to every process.
	Signals <-chan os.Signal
}

// DefaultGrace is Config.Grace's default.
const DefaultGrace = 5 * time.Second

// Validate reports the first field that cannot work.
func (c Config) Validate() error {
	nnodes := max(c.NNodes, 1)
	switch {
	case c.N < 1:
		return fmt.Errorf("%d processes per node, need at least 1", c.N)
	case c.NNodes < 0:
		return fmt.Errorf("%d nodes", c.NNodes)
	case c.NodeRank < 0 || c.NodeRank >= nnodes:
		return fmt.Errorf("node rank %d not in [0, %d)", c.NodeRank, nnodes)
	case c.MasterPort < 0 || c.MasterPort > 65535:
		return fmt.Errorf("master port %d not in [0, 65535]", c.MasterPort)
	case c.Grace < 0:
		return fmt.Errorf("negative grace period %v", c.Grace)
	case nnodes == 1:
		return nil
	case c.MasterAddr == "":
		return errors.New("a job over several nodes needs the master address (node 0's, reachable from every node)")
	case c.MasterPort == 0:
		return errors.New("a job over several nodes needs an explicit master port, the same on every node")
	case c.Token == "":
		return errors.New("a job over several nodes needs MEGAGO_JOB_TOKEN set to the same value on every node")
	}
	return nil
}

// resolve fills in the one-host defaults.
func (c Config) resolve() (Config, error) {
	if err := c.Validate(); err != nil {
		return c, err
	}
	c.NNodes = max(c.NNodes, 1)
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.MasterAddr == "" {
		c.MasterAddr = "127.0.0.1"
	}
	if c.MasterPort == 0 {
		ln, err := net.Listen("tcp", net.JoinHostPort(c.MasterAddr, "0"))
		if err != nil {
			return c, fmt.Errorf("finding a free port on %s: %w", c.MasterAddr, err)
		}
		c.MasterPort = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	if c.Token == "" {
		b := make([]byte, 16)
		rand.Read(b)
		c.Token = hex.EncodeToString(b)
	}
	return c, nil
}

// env returns the variables of local process i.
func (c Config) env(i int) []string {
	kv := func(k string, v int) string { return k + "=" + strconv.Itoa(v) }
	return []string{
		kv("RANK", c.NodeRank*c.N+i),
		kv("WORLD_SIZE", c.NNodes*c.N),
		kv("LOCAL_RANK", i),
		kv("LOCAL_WORLD_SIZE", c.N),
		kv("GROUP_RANK", c.NodeRank),
		"MASTER_ADDR=" + c.MasterAddr,
		kv("MASTER_PORT", c.MasterPort),
		"MEGAGO_JOB_TOKEN=" + c.Token,
	}
}

// ExitError reports the first process of a job that failed.
type ExitError struct {
	Rank int   // global rank
	PID  int   // process id
	Err  error // from exec.Cmd.Wait: an *exec.ExitError, usually
}

// Error says which rank failed and how: "rank 2 (pid 4242) failed: exit status 3".
func (e *ExitError) Error() string {
	return fmt.Sprintf("rank %d (pid %d) failed: %v", e.Rank, e.PID, e.Err)
}

// Unwrap returns the process's error, so that errors.As finds its *exec.ExitError.
func (e *ExitError) Unwrap() error { return e.Err }

// Run starts cfg.N processes running prog with args, waits for all of them and returns
// nil if all exit with status 0. Otherwise it stops the others (SIGTERM, then SIGKILL
// after cfg.Grace) and returns an *ExitError for the first that failed; if ctx ends or a
// signal is forwarded first, the error says so instead.
func Run(ctx context.Context, cfg Config, prog string, args []string, stdout, stderr io.Writer) error {
	cfg, err := cfg.resolve()
	if err != nil {
		return err
	}
	var outMu sync.Mutex
	procs := make([]*proc, 0, cfg.N)
	for i := range cfg.N {
		p := &proc{rank: cfg.NodeRank*cfg.N + i}
		p.out = &prefixWriter{mu: &outMu, w: stdout, prefix: fmt.Sprintf("[rank %d] ", p.rank)}
		p.errOut = &prefixWriter{mu: &outMu, w: stderr, prefix: p.out.prefix}
		p.cmd = exec.Command(prog, args...)
		p.cmd.Env = append(append(os.Environ(), cfg.ExtraEnv...), cfg.env(i)...)
		p.cmd.Stdout, p.cmd.Stderr = p.out, p.errOut
		p.cmd.WaitDelay = cfg.Grace
		ownProcessGroup(p.cmd)
		if err := p.cmd.Start(); err != nil {
			for _, q := range procs {
				q.signal(syscall.SIGKILL)
				q.cmd.Wait()
			}
			return fmt.Errorf("starting rank %d: %w", p.rank, err)
		}
		procs = append(procs, p)
	}
	return supervise(ctx, cfg, procs)
}

type proc struct {
	rank        int
	cmd         *exec.Cmd
	out, errOut *prefixWriter
	done        bool
}

func (p *proc) signal(sig os.Signal) {
	if !p.done {
		signalGroup(p.cmd.Process, sig)
	}
}

// supervise waits for every process, stopping the rest when one fails, ctx ends or a
// signal arrives.
func supervise(ctx context.Context, cfg Config, procs []*proc) error {
	type exit struct {
		p   *proc
		err error
	}
	exits := make(chan exit, len(procs))
	for _, p := range procs {
		go func() {
			err := p.cmd.Wait()
			p.out.Flush()
			p.errOut.Flush()
			exits <- exit{p, err}
		}()
	}
	var first error
	var kill <-chan time.Time
	stop := func(sig os.Signal, why error) {
		if first == nil {
			first = why
		}
		for _, p := range procs {
			p.signal(sig)
		}
		if kill == nil {
			kill = time.After(cfg.Grace)
		}
	}
	done := ctx.Done()
	for running := len(procs); running > 0; {
		select {
		case e := <-exits:
			e.p.done = true
			running--
			if e.err != nil && first == nil {
				stop(syscall.SIGTERM, &ExitError{Rank: e.p.rank, PID: e.p.cmd.Process.Pid, Err: e.err})
			}
		case <-done:
			done = nil
			stop(syscall.SIGTERM, fmt.Errorf("stopped: %w", context.Cause(ctx)))
		case sig := <-cfg.Signals:
			stop(sig, fmt.Errorf("interrupted by %v", sig))
		case <-kill:
			for _, p := range procs {
				p.signal(syscall.SIGKILL)
			}
		}
	}
	return first
}
