package fakedev_test

import (
	"fmt"

	"megago/internal/fakedev"
	"megago/tensor"
)

// A chain of ops between one upload and one download: the fake backend counts exactly
// those two copies, so the ops ran on the device.
func Example() {
	dev, err := tensor.Open(fakedev.Name)
	if err != nil {
		fmt.Println(err)
		return
	}
	s := dev.NewScope()
	x := tensor.FromSlice(dev, []float32{1, 2, 3, 4}, 2, 2)           // upload
	y := tensor.Softmax(tensor.MatMul(x, x), tensor.SoftmaxOptions{}) // on the device
	sum := tensor.ToSlice[float32](tensor.Sum(y, 1))                  // download
	st := fakedev.Of(dev).Stats()
	s.Close()

	fmt.Println("row sums:", sum)
	fmt.Printf("host→device: %d copies, %d bytes\n", st.HostToDevice, st.HostToDeviceBytes)
	fmt.Printf("device→host: %d copies, %d bytes\n", st.DeviceToHost, st.DeviceToHostBytes)
	fmt.Println("x released:", x.Released())
	// Output:
	// row sums: [1 1]
	// host→device: 1 copies, 16 bytes
	// device→host: 1 copies, 8 bytes
	// x released: true
}
