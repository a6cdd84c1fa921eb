package report

import (
	"context"
	"fmt"

	"megago/internal/procmem"
	"megago/parallel"
	"megago/tensor"
)

// Memory is one rank's memory at the end of a run, in bytes.
type Memory struct {
	Rank int
	// PeakRSS is the process's peak resident set size (getrusage's maxrss; 0 where it
	// cannot be read). Ranks that are goroutines of one process share it.
	PeakRSS int64
	// TensorPeak is the most bytes the rank's device ever held in live tensors
	// (tensor.PoolStats.Peak); TensorHeld what it holds when the run ends: the
	// parameters, their gradients and the optimizer's state, which live across
	// iterations. TensorPeak − TensorHeld is the peak of what an iteration adds on top,
	// its activations and temporaries.
	TensorPeak, TensorHeld int64
}

// Activations returns TensorPeak − TensorHeld, the peak of an iteration's own tensors.
func (m Memory) Activations() int64 { return m.TensorPeak - m.TensorHeld }

// String formats the rank's line of the memory report, sizes in MB (10⁶ bytes).
func (m Memory) String() string {
	return fmt.Sprintf("memory: rank %d peak RSS %s, tensors peak %s (activations %s; parameters, gradients and optimizer %s)",
		m.Rank, megabytes(m.PeakRSS), megabytes(m.TensorPeak), megabytes(m.Activations()), megabytes(m.TensorHeld))
}

// megabytes formats n bytes in MB (10⁶ bytes).
func megabytes(n int64) string { return fmt.Sprintf("%.0f MB", float64(n)/1e6) }

// LocalMemory returns this process's peak RSS and dev's tensor bytes, as rank rank's
// Memory. Call it when the run's tensors of an iteration have been released.
func LocalMemory(rank int, dev *tensor.Device) Memory {
	s := dev.Stats()
	return Memory{Rank: rank, PeakRSS: procmem.PeakRSS(), TensorPeak: s.Peak, TensorHeld: s.InUse}
}

// GatherMemory returns every rank's Memory (LocalMemory), in rank order, on every rank of
// world: one all-gather of three numbers a rank. Every rank of world must call it.
func GatherMemory(ctx context.Context, world parallel.Comm, dev *tensor.Device) ([]Memory, error) {
	m := LocalMemory(world.Rank(), dev)
	src := tensor.FromSlice(dev, []float64{float64(m.PeakRSS), float64(m.TensorPeak), float64(m.TensorHeld)}, 3) // [3]
	defer src.Release()
	dst := tensor.Zeros(dev, tensor.F64, 3*world.Size()) // [3·world]
	defer dst.Release()
	if err := world.AllGather(ctx, dst, src); err != nil {
		return nil, fmt.Errorf("report: gathering the memory statistics: %w", err)
	}
	v := tensor.ToSlice[float64](dst)
	out := make([]Memory, world.Size())
	for r := range out {
		out[r] = Memory{Rank: r, PeakRSS: int64(v[3*r]), TensorPeak: int64(v[3*r+1]), TensorHeld: int64(v[3*r+2])}
	}
	return out, nil
}

// Memory prints one line per rank (Memory.String) and writes them to metrics.jsonl as
// one final record of kind "memory", e.g.
//
//	{"kind":"memory","ranks":[{"rank":0,"peak_rss":812000000,"tensor_peak":640000000,"tensor_held":12000000,"activations":628000000},...]}
func (r *Report) Memory(ms []Memory) {
	if r == nil {
		return
	}
	ranks := make([]Record, len(ms))
	for i, m := range ms {
		r.Printf("%s\n", m)
		ranks[i] = Record{{"rank", m.Rank}, {"peak_rss", m.PeakRSS}, {"tensor_peak", m.TensorPeak},
			{"tensor_held", m.TensorHeld}, {"activations", m.Activations()}}
	}
	r.keep(r.metrics.Path(), r.metrics.Write(Record{{"kind", "memory"}, {"ranks", ranks}}))
	r.flush()
}
