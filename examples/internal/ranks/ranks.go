package ranks

import (
	"context"
	"io"

	"megago/nn"
	"megago/parallel"
	"megago/parallel/tcp"
	"megago/tensor"
)

// FromEnv returns the TCP job this process belongs to, described by the environment
// variables torchrun and megago launch set (RANK, WORLD_SIZE, MASTER_ADDR, ...) or
// Slurm's; nil when there is none.
func FromEnv(getenv func(string) string) (*tcp.Config, error) {
	if getenv("RANK") == "" && getenv("SLURM_PROCID") == "" {
		return nil, nil
	}
	t, err := tcp.ConfigFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// Builder reports whether this process builds the caches (the default corpus, dataset
// indices) on its host: local rank 0 of a TCP job, or the only process.
func Builder(job *tcp.Config) bool {
	return job == nil || job.LocalRank == 0 || (job.LocalRank < 0 && job.Rank == 0)
}

// Output returns where a process of a TCP job reports: stdout on rank 0, nowhere on
// the others (their errors still reach stderr).
func Output(job *tcp.Config, stdout io.Writer) io.Writer {
	if job != nil && job.Rank != 0 {
		return io.Discard
	}
	return stdout
}

// Run runs fn on every rank: this process's rank of the TCP job job, n goroutine ranks
// (job nil, n > 1), or this process alone. fn gets the world and where to report:
// stdout on world rank 0, io.Discard on the others. It returns the first error.
func Run(ctx context.Context, job *tcp.Config, n int, stdout io.Writer, fn func(world parallel.Comm, out io.Writer) error) error {
	switch {
	case job != nil:
		world, err := tcp.New(ctx, *job)
		if err != nil {
			return err
		}
		if c, ok := world.(io.Closer); ok {
			defer c.Close()
		}
		return fn(world, stdout)
	case n > 1:
		return parallel.RunLocal(n, func(world parallel.Comm) error {
			out := io.Discard
			if world.Rank() == 0 {
				out = stdout
			}
			return fn(world, out)
		})
	}
	return fn(parallel.Self(), stdout)
}

// StopRequested reports whether any rank's ctx has ended (Ctrl-C): a MAX all-reduce
// over the world under work, which is not cancelled, so that every rank stops after the
// same iteration.
func StopRequested(ctx, work context.Context, world parallel.Comm, dev *tensor.Device) (bool, error) {
	flag := 0.0
	if ctx.Err() != nil {
		flag = 1
	}
	v := tensor.Scalar(dev, tensor.F64, flag)
	defer v.Release()
	if err := world.AllReduce(work, v, parallel.Max); err != nil {
		return false, err
	}
	return v.Item() > 0, nil
}

// CountParams returns the parameters of the whole model given this rank's: its shards
// summed over its model-parallel group, each TP-replicated parameter counted once and a
// tied embedding's Shared copy not at all.
func CountParams(ctx context.Context, mesh *parallel.Mesh, params []*nn.Param, dev *tensor.Device) (int64, error) {
	n := 0.0
	for _, p := range params {
		if !p.Shared && (!p.TPReplicated || mesh.Coord().TP == 0) {
			n += float64(p.Numel())
		}
	}
	v := tensor.Scalar(dev, tensor.F64, n)
	defer v.Release()
	if err := mesh.MP().AllReduce(ctx, v, parallel.Sum); err != nil {
		return 0, err
	}
	return int64(v.Item()), nil
}
