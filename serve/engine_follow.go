package serve

import (
	"context"
	"errors"
	"fmt"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// Ranks as processes (megago launch): rank 0 of the TP group runs the engine
// (NewLeaderEngine); every other rank calls Follow. Each step rank 0 broadcasts its plan
// over the TP group, as an I32 tensor [n] after its length [1] (length 0: stop), and
// every rank runs it on its own model and cache; the logits are gathered inside the step
// on every rank, and only rank 0 reads them. While idle, rank 0 sends an empty plan
// every EngineConfig.Heartbeat, so that no follower's wait reaches the transport's
// timeout.

// NewLeaderEngine starts an engine on rank 0 of a TP group of processes: m is this rank's
// model, built on tp. Every other rank of tp must call Follow with its model; they stop
// when the engine is closed.
func NewLeaderEngine(m *nn.GPT, tp parallel.Comm, cfg EngineConfig) (*Engine, error) {
	if tp.Rank() != 0 {
		return nil, fmt.Errorf("serve: NewLeaderEngine on TP rank %d: ranks other than 0 call Follow", tp.Rank())
	}
	return newEngine([]*nn.GPT{m}, cfg, tp)
}

// Follow runs, on a TP rank other than 0, the steps that rank 0's engine
// (NewLeaderEngine) broadcasts over tp, with m, until that engine is closed. It returns
// an error if a collective or a step fails.
func Follow(ctx context.Context, m *nn.GPT, tp parallel.Comm) error {
	size, err := receiveInts(ctx, tp, m)
	if err != nil {
		return err
	}
	if len(size) != 2 {
		return errors.New("serve: Follow: rank 0 sent no cache size")
	}
	cache := nn.NewSlotCache(m, int(size[0]), int(size[1]))
	defer cache.Release()
	p := decodePass(ctx)
	if err := warmUp(p, m, cache); err != nil {
		return fmt.Errorf("serve: Follow: %w", err)
	}
	for {
		msg, err := receiveInts(ctx, tp, m)
		if err != nil || len(msg) == 0 {
			return err
		}
		plan, err := decodePlan(msg)
		if err != nil {
			return err
		}
		if len(plan.seqs) == 0 {
			continue // rank 0's heartbeat while idle
		}
		if _, err := decodeStep(p, m, cache, plan.ids, plan.seqs); err != nil {
			return fmt.Errorf("serve: Follow: %w", err)
		}
	}
}

// encodePlan lays a plan out as [N, S, ids (N), S × (slot, past, n, logits)].
func encodePlan(p stepPlan) []int32 {
	out := append([]int32{int32(len(p.ids)), int32(len(p.seqs))}, p.ids...)
	for _, s := range p.seqs {
		out = append(out, int32(s.Slot), int32(s.Past), int32(s.N), int32(s.Logits))
	}
	return out
}

// decodePlan is encodePlan's inverse (without owners).
func decodePlan(msg []int32) (stepPlan, error) {
	if len(msg) < 2 || len(msg) != 2+int(msg[0])+4*int(msg[1]) {
		return stepPlan{}, fmt.Errorf("serve: Follow: malformed plan of %d values", len(msg))
	}
	n, s := int(msg[0]), int(msg[1])
	p := stepPlan{ids: msg[2 : 2+n]}
	for i := range s {
		f := msg[2+n+4*i:]
		p.seqs = append(p.seqs, nn.DecodeSeq{Slot: int(f[0]), Past: int(f[1]), N: int(f[2]), Logits: int(f[3])})
	}
	return p, nil
}

// broadcastInts sends x from rank 0 of tp: its length, then (if not empty) its values,
// as tensors on m's device.
func broadcastInts(ctx context.Context, tp parallel.Comm, m *nn.GPT, x []int32) error {
	s := m.Word.Weight.Device().NewScope()
	defer s.Close()
	dev := m.Word.Weight.Device()
	if err := tp.Broadcast(ctx, tensor.FromSlice(dev, []int32{int32(len(x))}, 1), 0); err != nil || len(x) == 0 {
		return err
	}
	return tp.Broadcast(ctx, tensor.FromSlice(dev, x, len(x)), 0)
}

// receiveInts receives what rank 0's broadcastInts sends.
func receiveInts(ctx context.Context, tp parallel.Comm, m *nn.GPT) ([]int32, error) {
	dev := m.Word.Weight.Device()
	s := dev.NewScope()
	defer s.Close()
	n := tensor.Zeros(dev, tensor.I32, 1)
	if err := tp.Broadcast(ctx, n, 0); err != nil {
		return nil, fmt.Errorf("serve: Follow: %w", err)
	}
	k := int(tensor.ToSlice[int32](n)[0])
	if k == 0 {
		return nil, nil
	}
	x := tensor.Zeros(dev, tensor.I32, k)
	if err := tp.Broadcast(ctx, x, 0); err != nil {
		return nil, fmt.Errorf("serve: Follow: %w", err)
	}
	return tensor.ToSlice[int32](x), nil
}
