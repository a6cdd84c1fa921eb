package data

import (
	"context"
	"errors"
	"io"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The loader hands out exactly the sequential collation, in sampler order, however the
// workers interleave.
func TestLoaderOrder(t *testing.T) {
	src := cacheTestSource()
	ds, err := NewGPTDataset(context.Background(), src, SplitTrain, 0, GPTConfig{SeqLen: 8, Split: "1", EOD: -1})
	if err != nil {
		t.Fatal(err)
	}
	sampler := NewPretrainingSampler(ds.Len(), 16, 4, 1, 2)
	collate := CollateGPT(ds)
	slow := func(ctx context.Context, idx []int) (GPTBatch, error) {
		time.Sleep(time.Duration(idx[0]%3) * time.Millisecond) // finish out of order
		return collate(ctx, idx)
	}
	l := NewLoader(context.Background(), sampler.Batches(), slow, LoaderConfig{Workers: 4, Prefetch: 3})
	defer l.Close()
	k := 0
	for got, err := range l.All() {
		if err != nil {
			t.Fatal(err)
		}
		want, _ := collate(context.Background(), sampler.Batch(k))
		if got.B != 4 || got.T != 8 || !slices.Equal(got.Indices, want.Indices) || !slices.Equal(got.Tokens, want.Tokens) ||
			!slices.Equal(got.Labels, want.Labels) || !slices.Equal(got.LossMask, want.LossMask) || !slices.Equal(got.PositionIDs, want.PositionIDs) {
			t.Fatalf("batch %d differs from its sequential collation", k)
		}
		if row := got.Row(2); !slices.Equal(row.Tokens, ds.Sample(got.Indices[2]).Tokens) {
			t.Fatalf("batch %d row 2 is not sample %d", k, got.Indices[2])
		}
		k++
	}
	if k != sampler.NumBatches() {
		t.Fatalf("loader gave %d batches, want %d", k, sampler.NumBatches())
	}
	if _, err := l.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("Next after the end: %v, want io.EOF", err)
	}
}

// At most Prefetch batches are assembled ahead of the consumer. synctest.Wait returns
// once every loader goroutine is blocked, so the counts are exact.
func TestLoaderPrefetchBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const prefetch = 3
		var made atomic.Int64
		collate := func(_ context.Context, idx []int) (int, error) {
			made.Add(1)
			return idx[0], nil
		}
		l := NewLoader(t.Context(), NewPretrainingSampler(100, 0, 1, 0, 1).Batches(), collate, LoaderConfig{Workers: 2, Prefetch: prefetch})
		defer l.Close()
		synctest.Wait()
		if got := made.Load(); got != prefetch {
			t.Fatalf("%d batches made before any was consumed, want %d", got, prefetch)
		}
		for consumed := 1; consumed <= 10; consumed++ {
			b, err := l.Next()
			if err != nil || b != consumed-1 {
				t.Fatalf("Next = %d, %v; want %d", b, err, consumed-1)
			}
			synctest.Wait()
			if got := made.Load(); got != int64(consumed+prefetch) {
				t.Fatalf("%d consumed: %d made, want %d", consumed, got, consumed+prefetch)
			}
		}
	})
}

// waitGoroutines waits for the goroutine count to fall to at most n.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines remain, want ≤ %d:\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
}

// Cancelling the context stops a loader whose workers are blocked in collate, and Close
// leaves no goroutine behind.
func TestLoaderCancel(t *testing.T) {
	base := runtime.NumGoroutine()
	started := make(chan struct{}, 100)
	blocking := func(ctx context.Context, idx []int) (int, error) {
		started <- struct{}{}
		<-ctx.Done()
		return 0, ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := NewLoader(ctx, NewPretrainingSampler(1000, 0, 2, 0, 1).Batches(), blocking, LoaderConfig{Workers: 4, Prefetch: 8})
	for range 4 {
		<-started
	}
	if runtime.NumGoroutine() < base+5 {
		t.Fatalf("%d goroutines with a loader of 4 workers, base %d", runtime.NumGoroutine(), base)
	}
	done := make(chan error)
	go func() { _, err := l.Next(); done <- err }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after cancel: %v, want context.Canceled", err)
	}
	l.Close()
	l.Close()
	waitGoroutines(t, base)
}

// Closing a loader mid-stream, with batches waiting, leaks nothing.
func TestLoaderCloseEarly(t *testing.T) {
	base := runtime.NumGoroutine()
	ds, err := NewGPTDataset(context.Background(), cacheTestSource(), SplitTrain, 0, GPTConfig{SeqLen: 8, Split: "1", EOD: -1})
	if err != nil {
		t.Fatal(err)
	}
	l := NewLoader(context.Background(), NewPretrainingSampler(ds.Len(), 0, 2, 0, 1).Batches(), CollateGPT(ds), LoaderConfig{})
	for range 3 {
		if _, err := l.Next(); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	if _, err := l.Next(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after Close: %v, want context.Canceled", err)
	}
	waitGoroutines(t, base)
}

func TestLoaderError(t *testing.T) {
	boom := errors.New("boom")
	collate := func(_ context.Context, idx []int) (int, error) {
		if idx[0] == 2 {
			return 0, boom
		}
		return idx[0], nil
	}
	l := NewLoader(context.Background(), NewPretrainingSampler(10, 0, 1, 0, 1).Batches(), collate, LoaderConfig{Workers: 1})
	defer l.Close()
	var got []int
	var last error
	for b, err := range l.All() {
		got, last = append(got, b), err
	}
	if !slices.Equal(got, []int{0, 1, 0}) || !errors.Is(last, boom) {
		t.Fatalf("All yielded %v ending with %v, want [0 1 0] ending with boom", got, last)
	}
}
