package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"megago/internal/launch"
)

func init() {
	register(command{
		name:    "launch",
		summary: "start the processes of a distributed job, as torchrun does",
		usage: `megago launch [flags] -- PROG [ARGS...]

Launch starts -n processes running PROG on this host and waits for them. Each
gets, on top of launch's own environment, the variables that
ConfigFromEnv of megago/parallel/tcp reads (the same torchrun sets):

	RANK, WORLD_SIZE         global rank (node-rank × n + local rank) and size
	LOCAL_RANK, LOCAL_WORLD_SIZE
	GROUP_RANK               the node rank
	MASTER_ADDR, MASTER_PORT where rank 0 listens
	MEGAGO_JOB_TOKEN         the job token: launch's own MEGAGO_JOB_TOKEN if set,
	                         else a random one

Every line a process prints is prefixed with "[rank N] ". Ctrl-C (SIGINT) and
SIGTERM are forwarded to every process; those still running after -grace are
killed. When a process fails, the others get SIGTERM (then SIGKILL after
-grace) and launch exits with status 1, naming the rank and its exit status.

One host, four processes:

	megago launch -n 4 -- ./train -config gpt.json

Several hosts: run one launch per host with the same --nnodes, --master-addr
(node 0's name or address, reachable from every host), --master-port and
MEGAGO_JOB_TOKEN, and each host's own --node-rank:

	export MEGAGO_JOB_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
	node0$ megago launch --nnodes 2 --node-rank 0 --master-addr node0 --master-port 29500 -n 8 -- ./train
	node1$ megago launch --nnodes 2 --node-rank 1 --master-addr node0 --master-port 29500 -n 8 -- ./train

Under Slurm no launcher is needed: srun starts one task per rank and sets
SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID, which ConfigFromEnv reads when
RANK is unset; the master is then the allocation's first host and the port
20000 + SLURM_JOB_ID mod 10000 unless MASTER_ADDR and MASTER_PORT say
otherwise. srun passes the environment on, so export the token first:

	export MEGAGO_JOB_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
	srun --nodes 2 --ntasks-per-node 8 ./train

(Or run "srun --ntasks-per-node 1 megago launch ..." with --node-rank
$SLURM_NODEID, as with torchrun.)`,
		run: runLaunch,
	})
}

func runLaunch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("launch", flag.ContinueOnError)
	var cfg launch.Config
	fs.IntVar(&cfg.N, "n", 1, "processes to start on this host")
	fs.IntVar(&cfg.N, "nproc-per-node", 1, "same as -n")
	fs.IntVar(&cfg.NNodes, "nnodes", 1, "hosts in the job (one launch on each)")
	fs.IntVar(&cfg.NodeRank, "node-rank", 0, "this host's index, 0..nnodes-1")
	fs.StringVar(&cfg.MasterAddr, "master-addr", "", "address of node 0, where rank 0 listens (default 127.0.0.1 on one host)")
	fs.IntVar(&cfg.MasterPort, "master-port", 0, "port rank 0 listens on (default: a free port, on one host)")
	fs.DurationVar(&cfg.Grace, "grace", launch.DefaultGrace, "time processes get to exit after SIGTERM before they are killed")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return &usageError{errors.New("no program to launch: megago launch [flags] -- PROG [ARGS...]")}
	}
	cfg.Token = os.Getenv("MEGAGO_JOB_TOKEN")
	if err := cfg.Validate(); err != nil {
		return &usageError{err}
	}
	if cfg.Grace == 0 {
		cfg.Grace = time.Nanosecond // 0 would mean the default
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	cfg.Signals = sigs
	// Signals reach the processes through cfg.Signals, the way they came; main's
	// context, which those same signals cancel, would turn them all into SIGTERM.
	return launch.Run(context.WithoutCancel(ctx), cfg, fs.Arg(0), fs.Args()[1:], stdout, stderr)
}
