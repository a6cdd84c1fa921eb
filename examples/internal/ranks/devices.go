package ranks

import (
	"megago/internal/device"
	"megago/parallel/tcp"
	"megago/tensor"
)

// Devices are the devices of this process's ranks, one per rank, opened by OpenDevices
// before any work starts, and how the ranks communicate.
type Devices struct {
	devs []*tensor.Device
	nccl bool // NCCL collectives and point-to-point between the ranks
}

// OpenDevices opens a device of the backend name (--device: cpu, cuda) for each rank
// this process runs: the one rank of the TCP job job, or n goroutine ranks (job nil).
// Goroutine ranks on cuda share the GPU, each with a backend (stream, allocator) of its
// own (device.Open). nccl (--distributed-backend nccl, which needs cuda) makes Run join
// the ranks with NCCL. Without a usable GPU the error says in at most three lines what
// was looked for. Close gives the devices back.
func OpenDevices(name string, nccl bool, job *tcp.Config, n int) (*Devices, error) {
	if job != nil {
		n = 1
	}
	d := &Devices{nccl: nccl}
	for range max(n, 1) {
		dev, err := device.Open(name)
		if err != nil {
			d.Close()
			return nil, err
		}
		d.devs = append(d.devs, dev)
	}
	return d, nil
}

// Close closes every device (device.Close). They must not be used afterwards.
func (d *Devices) Close() error { return device.CloseAll(d.devs) }
