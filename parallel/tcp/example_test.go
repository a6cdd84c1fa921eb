package tcp_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"megago/parallel"
	"megago/parallel/tcp"
	"megago/tensor"
)

// Two ranks of one job, here goroutines joined over loopback (in a real job, processes
// that megago launch starts, each calling tcp.New(ctx, cfg) with the Config that
// tcp.ConfigFromEnv(os.Getenv) reads), all-reduce a tensor holding their rank.
func ExampleNew() {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a free port for rank 0
	if err != nil {
		fmt.Println(err)
		return
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()

	const n = 2
	sums := make([]float32, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			cfg := tcp.Config{Rank: r, WorldSize: n, MasterAddr: "127.0.0.1", MasterPort: port,
				Token: "example-token", Timeout: 30 * time.Second}
			ctx := context.Background()
			world, err := tcp.New(ctx, cfg)
			if err != nil {
				errs[r] = err
				return
			}
			defer world.(io.Closer).Close()
			x := tensor.Full(tensor.NewCPU(), tensor.F32, float64(world.Rank()+1), 3)
			errs[r] = world.AllReduce(ctx, x, parallel.Sum)
			sums[r] = tensor.ToSlice[float32](x)[0]
		})
	}
	wg.Wait()
	fmt.Println(sums, errs)
	// Output: [3 3] [<nil> <nil>]
}

func ExampleConfigFromEnv() {
	env := map[string]string{ // as megago launch -n 4 sets it for the third process
		"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4",
		"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "MEGAGO_JOB_TOKEN": "5f1e...",
	}
	cfg, err := tcp.ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg.Timeout = 2 * time.Minute
	fmt.Printf("rank %d of %d, rendezvous at %s:%d\n", cfg.Rank, cfg.WorldSize, cfg.MasterAddr, cfg.MasterPort)
	// A program would now call: world, err := tcp.New(ctx, cfg)

	_, err = tcp.ConfigFromEnv(func(string) string { return "" })
	fmt.Println(err)
	// Output:
	// rank 2 of 4, rendezvous at 127.0.0.1:29500
	// parallel: environment: neither RANK (set by megago launch and torchrun) nor SLURM_PROCID (set by srun) is set
}
