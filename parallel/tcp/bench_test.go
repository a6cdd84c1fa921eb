package tcp

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"

	"megago/parallel"
	"megago/parallel/internal/commtest"
	"megago/tensor"
)

// BenchmarkAllReduce measures a float32 sum all-reduce over 2 ranks on the TCP transport
// and beside it ("copy") one TCP stream over loopback, the rate the TCP ring is compared
// with. Each reports bus bandwidth in GB/s (see commtest.ReportBusBandwidth), timed after
// one untimed warm-up call, as the in-process transport's BenchmarkAllReduce in package
// parallel does.
//
// What is compared. The TCP ranks are goroutines of this process joined over loopback
// with the default Config (1 MiB segments) and default socket settings, reducing
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
//	go test -run XXX -bench 'AllReduce/(tcp|copy)' ./parallel/tcp/
func BenchmarkAllReduce(b *testing.B) {
	b.Run("tcp", func(b *testing.B) {
		comms := benchTCP(b, commtest.BenchRanks)
		for _, size := range commtest.BenchSizes {
			b.Run(commtest.SizeName(size), func(b *testing.B) {
				xs := make([]*tensor.Tensor, len(comms))
				for r := range xs {
					xs[r] = tensor.Zeros(tensor.NewCPU(), tensor.F32, size/4)
				}
				allReduce := func(iters int) {
					var wg sync.WaitGroup
					for r, c := range comms {
						wg.Go(func() {
							for range iters {
								if err := c.AllReduce(context.Background(), xs[r], parallel.Sum); err != nil {
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
				commtest.ReportBusBandwidth(b, commtest.BenchRanks, size)
			})
		}
	})
	b.Run("copy", func(b *testing.B) {
		w, r := benchLoopbackPair(b)
		for _, size := range commtest.BenchSizes {
			b.Run(commtest.SizeName(size), func(b *testing.B) {
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
				commtest.ReportBusBandwidth(b, 1, size)
			})
		}
	})
}

// benchTCP joins n goroutine ranks over loopback with the default settings (closed at
// the end of the benchmark).
func benchTCP(b *testing.B, n int) []parallel.Comm {
	port := freePort(b)
	comms := make([]parallel.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			cfg := tcpConfig(r, n, port)
			cfg.SegmentBytes = 0
			comms[r], errs[r] = New(context.Background(), cfg)
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
