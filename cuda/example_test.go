package cuda_test

import (
	"context"
	"errors"
	"fmt"

	"megago/cuda"
	"megago/parallel"
	"megago/tensor"
)

// Opening the GPU, falling back to the CPU on a machine without one. Importing package
// cuda registers the backend under cuda.Name, so tensor.Open(cuda.Name) opens it too.
func Example() {
	var dev *tensor.Device
	b, err := cuda.Open(cuda.Config{Device: cuda.AutoDevice})
	switch {
	case errors.Is(err, cuda.ErrNoDevice):
		dev = tensor.NewCPU()
	case err != nil:
		panic(err)
	default:
		defer b.Close()
		dev = tensor.NewDevice(b)
		p := b.Properties()
		fmt.Printf("%s, sm_%d, %d SMs\n", p.Name, p.Arch(), p.SMs)
	}
	x := tensor.Ones(dev, tensor.F32, 2, 3)
	fmt.Println(tensor.ToSlice[float32](tensor.Sum(x)))
}

// How a missing GPU is reported: cuda.Open (and tensor.Open("cuda")) return an error that
// wraps cuda.ErrNoDevice; when a library is missing it is a *cuda.LoadError listing the
// file names looked for and the folders looked in. (The error is built by hand here, so
// the output is the same on every machine.)
func ExampleLoadError() {
	var err error = &cuda.LoadError{Library: "driver", Files: []string{"libcuda.so.1", "libcuda.so"},
		Dirs: []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib64"}}
	err = fmt.Errorf("tensor: open backend %q: %w", cuda.Name, err)
	fmt.Println(errors.Is(err, cuda.ErrNoDevice))
	var le *cuda.LoadError
	if errors.As(err, &le) {
		fmt.Println("missing:", le.Library)
	}
	fmt.Println(err)
	// Output:
	// true
	// missing: driver
	// tensor: open backend "cuda": cuda: driver not found: looked for libcuda.so.1, libcuda.so in /usr/lib/x86_64-linux-gnu, /usr/lib64 and through the system loader
}

// Goroutine ranks with NCCL collectives: each rank opens its own Backend (its own GPU, or
// the kernel emulator when MEGAGO_CUDA_EMU=1 is set, where any number of ranks share the
// host) and builds its Comm with NewComm over the in-process transport, which carries
// NCCL's unique id. Under `megago launch` each process would use NewCommFromEnv instead.
func ExampleNewComm() {
	ctx := context.Background()
	err := parallel.RunLocal(2, func(boot parallel.Comm) error {
		b, err := cuda.Open(cuda.Config{Device: boot.Rank()})
		if err != nil {
			return err
		}
		defer b.Close()
		c, err := cuda.NewComm(ctx, boot, b)
		if err != nil {
			return err
		}
		defer c.Close()
		x := tensor.Full(tensor.NewDevice(b), tensor.F32, float64(boot.Rank()+1), 3)
		if err := c.AllReduce(ctx, x, parallel.Sum); err != nil {
			return err
		}
		fmt.Println(boot.Rank(), tensor.ToSlice[float32](x)) // [3 3 3] on both ranks
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
}
