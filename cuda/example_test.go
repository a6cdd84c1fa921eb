package cuda_test

import (
	"errors"
	"fmt"

	"megago/cuda"
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
