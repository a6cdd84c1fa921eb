package serve

import (
	"context"
	"errors"
	"fmt"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// rank runs one TP rank's model on its own goroutine: each plan it receives becomes one
// DecodeStep on its KV cache.
type rank struct {
	m       *nn.GPT
	cache   *nn.SlotCache
	leader  parallel.Comm // with process ranks, rank 0's TP group, over which it broadcasts plans
	plans   chan stepPlan
	results chan stepResult
	ended   chan struct{} // closed when the goroutine has released the cache
	ready   chan struct{} // closed when the goroutine has warmed up (warmUp)
}

// stepResult is a rank's answer to a plan.
type stepResult struct {
	rows [][]float64
	err  error
}

// startRank allocates m's cache and starts its goroutine, which runs under ctx (cancelled
// when a rank fails, so the others leave their collectives). With leader (rank 0 of
// process ranks) it first sends the cache's size to the followers and, when stopped,
// tells them to stop. The goroutine then warms up (warmUp) and closes r.ready.
func startRank(ctx context.Context, m *nn.GPT, cfg EngineConfig, leader parallel.Comm) *rank {
	r := &rank{m: m, cache: nn.NewSlotCache(m, cfg.MaxRequests, cfg.MaxSeqLen), leader: leader,
		plans: make(chan stepPlan), results: make(chan stepResult), ended: make(chan struct{}),
		ready: make(chan struct{})}
	go func() {
		defer close(r.ended)
		defer r.cache.Release()
		p := decodePass(ctx)
		var err error // a failed broadcast: the followers are gone, the steps fail
		if leader != nil {
			err = broadcastInts(ctx, leader, m, []int32{int32(cfg.MaxRequests), int32(cfg.MaxSeqLen)})
		}
		if err == nil {
			err = warmUp(p, m, r.cache)
		}
		close(r.ready)
		for plan := range r.plans {
			if err == nil && leader != nil {
				err = broadcastInts(ctx, leader, m, encodePlan(plan))
			}
			switch {
			case err != nil:
				r.results <- stepResult{err: fmt.Errorf("serve: sending the plan to the TP ranks: %w", err)}
			case len(plan.seqs) == 0: // the leader's heartbeat
				r.results <- stepResult{}
			default:
				r.results <- r.step(p, plan)
			}
		}
		if err == nil && leader != nil {
			broadcastInts(ctx, leader, m, nil) // an empty plan: stop
		}
	}()
	return r
}

// step runs plan, turning a panic into an error (the engine then stops).
func (r *rank) step(p *nn.Pass, plan stepPlan) (res stepResult) {
	defer func() {
		if v := recover(); v != nil {
			res.err = fmt.Errorf("serve: engine step: %v", v)
		}
	}()
	rows, err := decodeStep(p, r.m, r.cache, plan.ids, plan.seqs)
	return stepResult{rows, err}
}

// decodePass returns the pass a rank's steps run in: evaluation, with the weights packed
// once (tensor.PackedWeights).
func decodePass(ctx context.Context) *nn.Pass {
	p := nn.Eval(ctx)
	p.Packed = tensor.NewPackedWeights()
	return p
}

// decodeStep is m.DecodeStep, after which the device's pool is trimmed (trimPool).
func decodeStep(p *nn.Pass, m *nn.GPT, c *nn.SlotCache, ids []int32, seqs []nn.DecodeSeq) ([][]float64, error) {
	rows, err := m.DecodeStep(p, c, ids, seqs)
	trimPool(m.Word.Weight.Device())
	return rows, err
}

// warmUp runs one step of one token in slot 0 (whose positions a request overwrites
// before reading them), so that p.Packed packs m's weights before the first request
// instead of during it. Every TP rank runs it at the same point: its collectives match.
func warmUp(p *nn.Pass, m *nn.GPT, c *nn.SlotCache) error {
	_, err := decodeStep(p, m, c, []int32{0}, []nn.DecodeSeq{{Slot: 0, N: 1, Logits: 1}})
	return err
}

// poolSlack is the most unused storage, in bytes, that a rank's device may keep cached
// between steps. The device's pool reuses a buffer only for a tensor of the same size,
// and a step's sizes follow its token count, which changes from step to step: kept, the
// buffers of every count ever seen would grow the heap by gigabytes, each fresh one
// faulting its pages in on first write (a third of the CPU time of 32 clients). Emptied
// past this bound, the storage returns to the garbage collector, which recycles its
// pages for the next sizes.
const poolSlack = 256 << 20

// trimPool empties dev's pool when it caches more than poolSlack unused bytes.
func trimPool(dev *tensor.Device) {
	if st := dev.Stats(); st.Reserved-st.InUse > poolSlack {
		dev.EmptyCache()
	}
}

// run runs plan on every rank and returns rank 0's logits rows (every rank has the same).
// After an error the ranks' context is cancelled: the engine is done.
func (e *Engine) run(plan stepPlan) ([][]float64, error) {
	for _, r := range e.ranks {
		r.plans <- plan
	}
	var rows [][]float64
	var errs []error
	for i, r := range e.ranks {
		res := <-r.results
		if res.err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w", i, res.err))
			e.cancel()
		}
		if i == 0 {
			rows = res.rows
		}
	}
	return rows, errors.Join(errs...)
}

// stopRanks ends the ranks' goroutines, which tell followers to stop and free their
// caches, and waits for them.
func (e *Engine) stopRanks() {
	for _, r := range e.ranks {
		close(r.plans)
	}
	for _, r := range e.ranks {
		<-r.ended
	}
	e.cancel()
}

// LocalTP builds tp goroutine-rank models for NewEngine: build runs on each rank of a
// parallel.RunLocal group with its TP comm (give each its own device), and the ranks stay
// alive until release is called, after the engine's Close. It returns build's first
// error, or RunLocal's.
func LocalTP(tp int, build func(c parallel.Comm) (*nn.GPT, error)) (models []*nn.GPT, release func() error, err error) {
	models = make([]*nn.GPT, tp)
	stop := make(chan struct{})
	built := make(chan error, tp)
	ended := make(chan error, 1)
	go func() {
		ended <- parallel.RunLocal(tp, func(c parallel.Comm) error {
			m, err := build(c)
			models[c.Rank()] = m
			built <- err
			if err != nil {
				return err
			}
			<-stop
			return nil
		})
	}()
	for range tp {
		if err = <-built; err != nil {
			close(stop)
			<-ended
			return nil, nil, err
		}
	}
	var once bool
	release = func() error {
		if once {
			return nil
		}
		once = true
		close(stop)
		return <-ended
	}
	return models, release, nil
}
