package parallel

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"

	"megago/tensor"
)

// benchSizes are the message sizes of BenchmarkAllReduce, in bytes.
var benchSizes = []int{1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 32 << 20, 64 << 20}

func benchSizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMB", n>>20)
	}
	return fmt.Sprintf("%dKB", n>>10)
}

// benchRanks is the group size of BenchmarkAllReduce.
const benchRanks = 2

// reportBusBandwidth reports GB/s (10⁹ bytes a second) of bus bandwidth for an
// all-reduce of size bytes over n ranks done b.N times: 2(n−1)/n · size / t, as
// nccl-tests define it (a ring all-reduce sends and receives that much on every rank,
// so bus bandwidth is the rate of each link of the ring); with n = 1 (the copy), size / t.
func reportBusBandwidth(b *testing.B, n, size int) {
	factor := 1.0
	if n > 1 {
		factor = 2 * float64(n-1) / float64(n)
	}
	b.ReportMetric(factor*float64(size)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

// BenchmarkAllReduce measures a float32 sum all-reduce over 2 ranks on the in-process
// ("local") and TCP transports, and beside them ("copy") one TCP stream over loopback,
// the rate the TCP ring is compared with. Each reports bus bandwidth in GB/s (see
// reportBusBandwidth), timed after one untimed warm-up call.
//
// What is compared. The TCP ranks are goroutines of this process joined over loopback
// with the default TCPConfig (1 MiB segments) and default socket settings, reducing
// tensors in place. The copy writes a size-byte buffer into one loopback connection
// (default settings) with one Write call and reads it with io.ReadFull on another
// goroutine: what the kernel alone delivers through one socket, with no framing, no
// reduction and no tensor. Both run in the same process on the same cores, one after the
// other. With 2 ranks bus bandwidth is size / t and each rank sends and receives size
// bytes a call, so a ring at half the copy's rate moves as many bytes a second through
// the loopback device, in total, as the copy: 0.5× is parity in kernel work, reached
// when the copy leaves cores idle. On a machine busy with other work the ring, needing
// twice the CPU time of the copy, loses more of its rate; compare on an idle machine or
// under a real-time policy (chrt -f 10).
//
//	go test -run XXX -bench 'AllReduce/(tcp|copy)' ./parallel/
func BenchmarkAllReduce(b *testing.B) {
	b.Run("local", func(b *testing.B) {
		for _, size := range benchSizes {
			b.Run(benchSizeName(size), func(b *testing.B) {
				var start sync.WaitGroup
				start.Add(benchRanks)
				err := RunLocal(benchRanks, func(c Comm) error {
					x := tensor.Zeros(tensor.NewCPU(), tensor.F32, size/4)
					if err := c.AllReduce(context.Background(), x, Sum); err != nil { // warm-up
						return err
					}
					start.Done()
					start.Wait()
					if c.Rank() == 0 {
						b.ResetTimer()
					}
					for range b.N {
						if err := c.AllReduce(context.Background(), x, Sum); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				reportBusBandwidth(b, benchRanks, size)
			})
		}
	})
	b.Run("tcp", func(b *testing.B) {
		comms := benchTCP(b, benchRanks)
		for _, size := range benchSizes {
			b.Run(benchSizeName(size), func(b *testing.B) {
				xs := make([]*tensor.Tensor, len(comms))
				for r := range xs {
					xs[r] = tensor.Zeros(tensor.NewCPU(), tensor.F32, size/4)
				}
				allReduce := func(iters int) {
					var wg sync.WaitGroup
					for r, c := range comms {
						wg.Go(func() {
							for range iters {
								if err := c.AllReduce(context.Background(), xs[r], Sum); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
				}
				allReduce(1) // warm-up: buffer pools, TCP windows
				b.ResetTimer()
				allReduce(b.N)
				b.StopTimer()
				reportBusBandwidth(b, benchRanks, size)
			})
		}
	})
	b.Run("copy", func(b *testing.B) {
		w, r := benchLoopbackPair(b)
		for _, size := range benchSizes {
			b.Run(benchSizeName(size), func(b *testing.B) {
				src, dst := make([]byte, size), make([]byte, size)
				transfer := func(iters int) {
					done := make(chan error, 1)
					go func() {
						for range iters {
							if _, err := w.Write(src); err != nil {
								done <- err
								return
							}
						}
						done <- nil
					}()
					for range iters {
						if _, err := io.ReadFull(r, dst); err != nil {
							b.Fatal(err)
						}
					}
					if err := <-done; err != nil {
						b.Fatal(err)
					}
				}
				transfer(1) // warm-up, as for the others
				b.ResetTimer()
				transfer(b.N)
				b.StopTimer()
				reportBusBandwidth(b, 1, size)
			})
		}
	})
}

// benchTCP joins n goroutine ranks over loopback with the default settings (closed at
// the end of the benchmark).
func benchTCP(b *testing.B, n int) []Comm {
	port := freePort(b)
	comms := make([]Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			cfg := tcpConfig(r, n, port)
			cfg.SegmentBytes = 0
			comms[r], errs[r] = NewTCP(context.Background(), cfg)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			b.Fatalf("rank %d: %v", r, err)
		}
	}
	b.Cleanup(func() {
		for _, c := range comms {
			c.(io.Closer).Close()
		}
	})
	return comms
}

// benchLoopbackPair returns the two ends of a loopback TCP connection.
func benchLoopbackPair(b *testing.B) (net.Conn, net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Skipf("needs loopback TCP: %v", err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	w, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	r := <-accepted
	if r == nil {
		b.Fatal("accept failed")
	}
	b.Cleanup(func() { w.Close(); r.Close() })
	return w, r
}
