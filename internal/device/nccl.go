package device

import (
	"context"
	"errors"
	"fmt"

	"megago/cuda"
	"megago/parallel"
	"megago/tensor"
)

// NCCL returns the NCCL communicator of boot's ranks (cuda.NewComm), this rank's on dev,
// which must be a CUDA device: collectives and point-to-point run on the GPU, and Split
// (the Mesh's TP, PP and DP groups) makes NCCL communicators too. boot carries NCCL's
// unique id and later Splits: the TCP world of a job under megago launch, torchrun or
// srun. Every rank of boot calls it. Closing the communicator does not close boot.
func NCCL(ctx context.Context, boot parallel.Comm, dev *tensor.Device) (parallel.Comm, error) {
	b, err := cudaBackend(dev)
	if err != nil {
		return nil, err
	}
	c, err := cuda.NewComm(ctx, boot, b)
	if err != nil {
		return nil, short("--distributed-backend nccl", err)
	}
	return c, nil
}

// ErrNoLocalNCCL is LocalNCCL's error until package cuda can join goroutine ranks.
var ErrNoLocalNCCL = errors.New("--distributed-backend nccl with --ranks N (goroutine ranks) is not available yet: run one process per GPU under megago launch, or use --distributed-backend tcp")

// LocalNCCL returns the NCCL communicators of goroutine ranks in this process, rank r's
// on devs[r] (CUDA devices): the world of --ranks N with --distributed-backend nccl.
// Rank r uses only the r-th communicator, from its own goroutine.
//
// It returns ErrNoLocalNCCL for now: package cuda has no constructor of an NCCL world
// within one process yet. On real GPUs NCCL refuses two ranks of one communicator on the
// same GPU, so goroutine ranks over NCCL need a GPU each (Open gives every goroutine rank
// cuda.AutoDevice's GPU); on the kernel emulator (MEGAGO_CUDA_EMU=1) any number share it.
func LocalNCCL(ctx context.Context, devs []*tensor.Device) ([]parallel.Comm, error) {
	for _, d := range devs {
		if _, err := cudaBackend(d); err != nil {
			return nil, err
		}
	}
	return nil, ErrNoLocalNCCL
}

// cudaBackend returns dev's CUDA backend.
func cudaBackend(dev *tensor.Device) (*cuda.Backend, error) {
	b, ok := dev.Backend().(*cuda.Backend)
	if !ok {
		return nil, fmt.Errorf("--distributed-backend nccl needs --device cuda, not %s", dev)
	}
	return b, nil
}
