// Package device opens the tensor device a megago program runs on, chosen by the name of
// its backend (--device cpu or cuda), and joins ranks on CUDA devices with NCCL. It is
// the one place where megago's programs (the examples, megago bench) open a device: it
// imports package cuda for its side effect, so "cuda" is registered with package tensor
// wherever it is used (package cuda is pure Go and builds with CGO_ENABLED=0).
//
// # Reading order
//
//   - device.go: Open, and Close, which gives a device's backend back.
//   - nccl.go: NCCL, the NCCL communicator of a bootstrap group's ranks: one process per
//     rank (under megago launch, torchrun or srun, over the TCP world), or goroutine ranks
//     of one process (over parallel.RunLocal's world).
//   - errors.go: the short form of "no GPU here".
//
// # Which GPU
//
// tensor.Open("cuda") opens cuda.AutoDevice: the device LOCAL_RANK modulo the number of
// visible devices (device 0 without LOCAL_RANK). The driver numbers only the devices
// CUDA_VISIBLE_DEVICES leaves visible, so a process of megago launch or torchrun takes
// the GPU of its local rank, and a process whose launcher narrowed CUDA_VISIBLE_DEVICES
// to one GPU takes that one. Goroutine ranks of one process (--ranks N) share that GPU,
// each with a backend of its own (see Open).
//
// # Errors
//
// Without a usable GPU, Open's error wraps cuda.ErrNoDevice (test with errors.Is) and
// says in at most three lines which library was looked for and where, shorter than
// package cuda's full report. NCCL errors are package cuda's.
package device
