package ranks

import (
	"context"
	"io"

	"megago/internal/device"
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
	if !Reports(job) {
		return io.Discard
	}
	return stdout
}

// Reports reports whether this process holds world rank 0, which prints the progress
// and writes the output files: rank 0 of a TCP job, or the only process.
func Reports(job *tcp.Config) bool {
	return job == nil || job.Rank == 0
}

// Run runs fn on every rank: this process's rank of the TCP job job, the goroutine
// ranks of devs (job nil, more than one device), or this process alone. fn gets the
// world, its rank's device (devs, opened by OpenDevices) and where to report: stdout on
// world rank 0, io.Discard on the others. With devs' NCCL the world is an NCCL
// communicator: over the TCP world, which carries NCCL's unique id, in a job, or
// the same over the in-process world for goroutine ranks. It returns the first error.
func Run(ctx context.Context, job *tcp.Config, devs *Devices, stdout io.Writer, fn func(world parallel.Comm, dev *tensor.Device, out io.Writer) error) error {
	switch {
	case job != nil:
		world, err := tcp.New(ctx, *job)
		if err != nil {
			return err
		}
		defer closeComm(world)
		if devs.nccl {
			if world, err = device.NCCL(ctx, world, devs.devs[0]); err != nil {
				return err
			}
			defer closeComm(world) // before the TCP world it was built over
		}
		return fn(world, devs.devs[0], stdout)
	case len(devs.devs) > 1:
		if devs.nccl {
			for _, d := range devs.devs {
				if err := device.CheckNCCL(d); err != nil {
					return err
				}
			}
		}
		return parallel.RunLocal(len(devs.devs), func(world parallel.Comm) error {
			r, out := world.Rank(), io.Discard
			if r == 0 {
				out = stdout
			}
			if devs.nccl {
				// The in-process world carries NCCL's unique id, as the TCP one does
				// between processes.
				nc, err := device.NCCL(ctx, world, devs.devs[r])
				if err != nil {
					return err
				}
				defer closeComm(nc)
				world = nc
			}
			return fn(world, devs.devs[r], out)
		})
	}
	return fn(parallel.Self(), devs.devs[0], stdout)
}

// closeComm closes c when it holds resources (connections, an NCCL communicator).
func closeComm(c parallel.Comm) {
	if cl, ok := c.(io.Closer); ok {
		cl.Close()
	}
}

// StopRequested reports whether any rank's ctx has ended (Ctrl-C): a MAX all-reduce
// over the world under work, which is not cancelled, so that every rank stops after the
// same iteration.
func StopRequested(ctx, work context.Context, world parallel.Comm, dev *tensor.Device) (bool, error) {
	stop, err := AnyRank(work, world, dev, ctx.Err() != nil)
	if err != nil {
		return false, err
	}
	return stop[0], nil
}

// AnyRank returns, for each of flags, whether it is set on any rank of world: one MAX
// all-reduce, so that every rank takes the same decision.
func AnyRank(ctx context.Context, world parallel.Comm, dev *tensor.Device, flags ...bool) ([]bool, error) {
	v := make([]float64, len(flags))
	for i, f := range flags {
		if f {
			v[i] = 1
		}
	}
	t := tensor.FromSlice(dev, v, len(v))
	defer t.Release()
	if err := world.AllReduce(ctx, t, parallel.Max); err != nil {
		return nil, err
	}
	out := make([]bool, len(flags))
	for i, x := range tensor.ToSlice[float64](t) {
		out[i] = x > 0
	}
	return out, nil
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
