package serve

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"megago/nn"
	"megago/parallel"
	"megago/parallel/tcp"
	"megago/tensor"
)

// TestLeaderAndFollower runs the process-rank protocol on goroutine ranks: rank 0's
// engine broadcasts each step's plan, rank 1 follows, and the tokens equal nn.Generate's
// at TP 2.
func TestLeaderAndFollower(t *testing.T) {
	cfg := testConfigs()["llama-gqa"]
	prompts := variedPrompts(5, 10, cfg.Vocab, 8)
	const newTokens = 5
	err := parallel.RunLocal(2, func(c parallel.Comm) error {
		b := &nn.Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(7), TP: c}
		m, err := nn.NewGPT(b, cfg, nn.Stage{})
		if err != nil {
			return err
		}
		want, err := nn.Generate(context.Background(), m, prompts, nn.GenerateOptions{MaxNewTokens: newTokens})
		if err != nil {
			return err
		}
		if c.Rank() != 0 {
			return Follow(context.Background(), m, c)
		}
		e, err := NewLeaderEngine(m, c, EngineConfig{MaxRequests: 3, MaxSeqLen: 32, PrefillChunk: 4})
		if err != nil {
			return err
		}
		chans := make([]<-chan Event, len(prompts))
		for i, p := range prompts {
			if chans[i], err = e.Submit(context.Background(), Request{Prompt: p, MaxNewTokens: newTokens}); err != nil {
				return err
			}
		}
		for i, ch := range chans {
			var ids []int32
			for ev := range ch {
				if ev.Token != nil {
					ids = append(ids, ev.Token.ID)
				}
			}
			if !equalIDs(ids, want[i]) {
				t.Errorf("prompt %d: engine %v, Generate %v", i, ids, want[i])
			}
		}
		return e.Close()
	})
	require.NoError(t, err)
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestLeaderHeartbeat runs the leader and a follower over TCP with a short transport
// timeout and leaves them idle for longer: the leader's heartbeats keep the follower's
// wait for the next plan alive, and a request after the pause still runs on both ranks.
func TestLeaderHeartbeat(t *testing.T) {
	const (
		timeout   = time.Second // every TCP call, the follower's wait for a plan included
		heartbeat = timeout / 10
		idle      = 3 * timeout / 2
	)
	cfg := testConfigs()["gpt2"]
	prompt := []int32{3, 1, 4, 1, 5}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			c, err := tcp.New(context.Background(), tcp.Config{Rank: r, WorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: port,
				Token: "heartbeat-test", Timeout: timeout, Logf: func(string, ...any) {}})
			if err != nil {
				errs[r] = err
				return
			}
			defer c.(io.Closer).Close()
			errs[r] = heartbeatRank(t, c, cfg, prompt, heartbeat, idle)
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
}

// heartbeatRank is TestLeaderHeartbeat's rank: rank 0 waits idle, then generates prompt
// and compares with nn.Generate; rank 1 follows.
func heartbeatRank(t *testing.T, c parallel.Comm, cfg nn.GPTConfig, prompt []int32, heartbeat, idle time.Duration) error {
	b := &nn.Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(7), TP: c}
	m, err := nn.NewGPT(b, cfg, nn.Stage{})
	if err != nil {
		return err
	}
	const newTokens = 4
	want, err := nn.Generate(context.Background(), m, [][]int32{prompt}, nn.GenerateOptions{MaxNewTokens: newTokens})
	if err != nil {
		return err
	}
	if c.Rank() != 0 {
		return Follow(context.Background(), m, c)
	}
	e, err := NewLeaderEngine(m, c, EngineConfig{MaxRequests: 1, MaxSeqLen: 16, Heartbeat: heartbeat})
	if err != nil {
		return err
	}
	time.Sleep(idle)
	ch, err := e.Submit(context.Background(), Request{Prompt: prompt, MaxNewTokens: newTokens})
	if err != nil {
		return errors.Join(err, e.Close())
	}
	var ids []int32
	for ev := range ch {
		if ev.Token != nil {
			ids = append(ids, ev.Token.ID)
		}
		if ev.Err != nil {
			t.Errorf("after %v idle: %v", idle, ev.Err)
		}
	}
	if !equalIDs(ids, want[0]) {
		t.Errorf("after %v idle: engine %v, Generate %v", idle, ids, want[0])
	}
	return e.Close()
}
