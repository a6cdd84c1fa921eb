package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"sync"
)

// LoaderConfig sizes a Loader's background work.
type LoaderConfig struct {
	// Workers is the number of goroutines assembling micro-batches; zero means 2.
	Workers int
	// Prefetch bounds the micro-batches assembled or being assembled ahead of the
	// consumer; zero means 2·Workers.
	Prefetch int
}

// Loader assembles micro-batches in background goroutines and hands them out in sampler
// order. At most Prefetch batches are being assembled or waiting at any time. A Loader is
// used by one goroutine; Close (or cancelling its context) stops every goroutine it
// started before returning.
//
// Pipeline: a dispatcher takes index lists from the sampler, waits for a prefetch slot,
// and hands the job to a worker pool and its result slot to the consumer's queue, both in
// order; Next waits on the head of that queue and frees the slot.
type Loader[T any] struct {
	ctx    context.Context
	cancel context.CancelFunc
	slots  chan struct{}       // one token per batch in flight
	queue  chan chan loaded[T] // result slots in sampler order
	wg     sync.WaitGroup
}

type loaded[T any] struct {
	batch T
	err   error
}

type loadJob[T any] struct {
	indices []int
	out     chan loaded[T]
}

// NewLoader starts assembling the micro-batches that batches yields with collate, which
// is called concurrently from cfg.Workers goroutines and must return once its context is
// done. A collate error, or a panic in collate (recovered), is what Next returns for
// that batch; the loader goes on with the next ones. An error matching io.EOF would
// read as the end of the batches: return io.ErrUnexpectedEOF for a short file. Each index slice from batches is handed to collate as is, so batches must not
// reuse them. Cancelling ctx stops the loader as Close does.
func NewLoader[T any](ctx context.Context, batches iter.Seq[[]int], collate func(ctx context.Context, indices []int) (T, error), cfg LoaderConfig) *Loader[T] {
	workers := cfg.Workers
	if workers <= 0 {
		workers = 2
	}
	prefetch := cfg.Prefetch
	if prefetch <= 0 {
		prefetch = 2 * workers
	}
	ctx, cancel := context.WithCancel(ctx)
	l := &Loader[T]{
		ctx: ctx, cancel: cancel,
		slots: make(chan struct{}, prefetch),
		queue: make(chan chan loaded[T], prefetch),
	}
	jobs := make(chan loadJob[T])
	l.wg.Add(1 + workers)
	go l.dispatch(batches, jobs)
	for range workers {
		go func() {
			defer l.wg.Done()
			for j := range jobs {
				b, err := collateSafely(ctx, collate, j.indices)
				j.out <- loaded[T]{b, err} // buffered: never blocks
			}
		}()
	}
	return l
}

// collateSafely calls collate, returning a panic in it as an error: one bad sample fails
// its batch (Next returns the error) instead of killing the process and every rank.
func collateSafely[T any](ctx context.Context, collate func(context.Context, []int) (T, error), indices []int) (b T, err error) {
	defer func() {
		if p := recover(); p != nil {
			var zero T
			b, err = zero, fmt.Errorf("data: loader: assembling the micro-batch of samples %v: panic: %v", brief(indices), p)
		}
	}()
	return collate(ctx, indices)
}

// brief returns indices, or its first and last elements when it is long.
func brief(indices []int) string {
	if len(indices) <= 4 {
		return fmt.Sprint(indices)
	}
	return fmt.Sprintf("[%d %d ... %d] (%d)", indices[0], indices[1], indices[len(indices)-1], len(indices))
}

// dispatch feeds jobs and the queue in sampler order until the sampler ends or the
// context is done.
func (l *Loader[T]) dispatch(batches iter.Seq[[]int], jobs chan<- loadJob[T]) {
	defer l.wg.Done()
	defer close(jobs)
	defer close(l.queue)
	for idx := range batches {
		select {
		case l.slots <- struct{}{}:
		case <-l.ctx.Done():
			return
		}
		out := make(chan loaded[T], 1)
		select {
		case jobs <- loadJob[T]{idx, out}:
		case <-l.ctx.Done():
			return
		}
		l.queue <- out // capacity prefetch ≥ slots held: never blocks
	}
}

// Next returns the next micro-batch: io.EOF after the last, the context's error once it
// is cancelled or the loader closed, or collate's error for that batch.
func (l *Loader[T]) Next() (T, error) {
	var zero T
	var out chan loaded[T]
	var ok bool
	if err := l.ctx.Err(); err != nil {
		return zero, err
	}
	select {
	case out, ok = <-l.queue:
		if !ok {
			if err := l.ctx.Err(); err != nil {
				return zero, err
			}
			return zero, io.EOF
		}
	case <-l.ctx.Done():
		return zero, l.ctx.Err()
	}
	select {
	case r := <-out:
		<-l.slots
		return r.batch, r.err
	case <-l.ctx.Done():
		return zero, l.ctx.Err()
	}
}

// All yields the batches until the end, or an error (not io.EOF), which is yielded last.
func (l *Loader[T]) All() iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		for {
			b, err := l.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			if !yield(b, err) || err != nil {
				return
			}
		}
	}
}

// Close stops the loader and waits for its goroutines to return. It is safe to call more
// than once.
func (l *Loader[T]) Close() {
	l.cancel()
	l.wg.Wait()
}
