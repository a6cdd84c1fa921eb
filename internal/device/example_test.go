package device_test

import (
	"fmt"

	"megago/internal/device"
)

// Open takes the name of a backend registered with package tensor: cpu, cuda (which this
// package registers). Without a GPU, opening cuda fails with a short error that wraps
// cuda.ErrNoDevice.
func ExampleOpen() {
	dev, err := device.Open("cpu")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer device.Close(dev)
	fmt.Println("training on", dev)
	_, err = device.Open("tpu")
	fmt.Println(err)
	// Output:
	// training on cpu
	// --device "tpu": want one of [cpu cuda]
}
