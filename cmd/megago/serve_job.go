package main

import (
	"context"
	"fmt"
	"io"

	"megago/internal/device"
	"megago/nn"
	"megago/parallel"
	"megago/parallel/tcp"
	"megago/serve"
	"megago/tensor"
)

// serveJob is this process's part of a megago serve run as the processes of a TCP job
// (megago launch, torchrun, srun): one TP rank, with its shard of the model on a device
// of its own. Rank 0 runs the engine (serve.NewLeaderEngine) and the HTTP server; the
// other ranks follow its steps (serve.Follow).
type serveJob struct {
	dev   *tensor.Device
	world parallel.Comm // the TP group: the whole job
	m     *nn.GPT
	cfg   nn.GPTConfig
}

// serveJobFromEnv returns the TCP job the environment describes (the variables megago
// launch, torchrun and srun set), or nil when there is none. It returns a usage error
// when the job's size is not --tensor-model-parallel-size.
func serveJobFromEnv(getenv func(string) string, tp int) (*tcp.Config, error) {
	if getenv("RANK") == "" && getenv("SLURM_PROCID") == "" {
		return nil, nil
	}
	cfg, err := tcp.ConfigFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	if cfg.WorldSize != tp {
		return nil, &usageError{fmt.Errorf("launched as %d processes, but --tensor-model-parallel-size is %d: megago serve runs one TP group, a process per rank",
			cfg.WorldSize, tp)}
	}
	return &cfg, nil
}

// startServeJob reads the model, opens this rank's device, joins the job and builds
// this rank's shard. close gives everything back.
func startServeJob(ctx context.Context, c *serveFlags, cfg tcp.Config) (*serveJob, error) {
	ck, err := readServeModel(c)
	if err != nil {
		return nil, err
	}
	j := &serveJob{cfg: ck.cfg}
	if j.dev, err = device.Open(c.device); err != nil {
		return nil, err
	}
	if j.world, err = tcp.New(ctx, cfg); err != nil {
		j.close()
		return nil, err
	}
	if j.m, err = ck.build(ctx, j.dev, j.world); err != nil {
		j.close()
		return nil, err
	}
	return j, nil
}

// close leaves the job and gives the device back.
func (j *serveJob) close() {
	if c, ok := j.world.(io.Closer); ok {
		c.Close()
	}
	device.Close(j.dev)
}

// followServe is megago serve on a rank other than 0 of a TCP job: it runs rank 0's
// steps until rank 0's engine stops. A signal does not stop it: rank 0 drains its
// requests first, then tells every rank to stop.
func followServe(ctx context.Context, c *serveFlags, cfg tcp.Config) error {
	j, err := startServeJob(ctx, c, cfg)
	if err != nil {
		return err
	}
	defer j.close()
	return serve.Follow(context.WithoutCancel(ctx), j.m, j.world)
}

// startServeEngine starts the engine megago serve answers with: over goroutine TP ranks,
// or, in a TCP job (on rank 0), over the job's processes. It returns what is served (for
// the start-up line, with the model's name) and stop, which closes the engine (telling
// the job's other ranks to stop) and gives everything back.
func startServeEngine(ctx context.Context, c *serveFlags, job *tcp.Config, name string) (gen *serve.Engine, what string, stop func(), err error) {
	if job == nil {
		ms, err := loadServeModels(c)
		if err != nil {
			return nil, "", nil, err
		}
		if gen, err = serve.NewEngine(ms.models, c.engineConfig()); err != nil {
			ms.close()
			return nil, "", nil, err
		}
		what = describeServed(name, ms.cfg, c.ranksText(ms.cfg, ""), c.device, c.maxSeqLen)
		return gen, what, func() { gen.Close(); ms.close() }, nil
	}
	j, err := startServeJob(ctx, c, *job)
	if err != nil {
		return nil, "", nil, err
	}
	if gen, err = serve.NewLeaderEngine(j.m, j.world, c.engineConfig()); err != nil {
		j.close()
		return nil, "", nil, err
	}
	what = describeServed(name, j.cfg, c.ranksText(j.cfg, " as processes"), c.device, c.maxSeqLen)
	return gen, what, func() { gen.Close(); j.close() }, nil
}
