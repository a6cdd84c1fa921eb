package device

import (
	"context"
	"fmt"

	"megago/cuda"
	"megago/parallel"
	"megago/tensor"
)

// NCCL returns the NCCL communicator of boot's ranks (cuda.NewComm), this rank's on dev,
// which must be a CUDA device: collectives and point-to-point run on the GPU, and Split
// (the Mesh's TP, PP and DP groups) makes NCCL communicators too. boot carries NCCL's
// unique id and later Splits: the TCP world of a job under megago launch, torchrun or
// srun, or the in-process world of goroutine ranks (parallel.RunLocal). Every rank of
// boot calls it. Closing the communicator does not close boot. On real GPUs NCCL refuses
// two ranks of one communicator on the same GPU, so goroutine ranks over NCCL need a GPU
// each; on the kernel emulator (MEGAGO_CUDA_EMU=1) any number share it.
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

// CheckNCCL returns the error NCCL would return for dev if dev is not a CUDA device, so
// that goroutine ranks can be refused once, before any of them starts.
func CheckNCCL(dev *tensor.Device) error {
	_, err := cudaBackend(dev)
	return err
}

// cudaBackend returns dev's CUDA backend.
func cudaBackend(dev *tensor.Device) (*cuda.Backend, error) {
	b, ok := dev.Backend().(*cuda.Backend)
	if !ok {
		return nil, fmt.Errorf("--distributed-backend nccl needs --device cuda, not %s", dev)
	}
	return b, nil
}
