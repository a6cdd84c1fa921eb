package optim

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/parallel"
	"megago/tensor"
)

const (
	dpSteps       = 20
	dpGlobalBatch = 8
	dpSeq         = 8
	dpVocab       = 64
)

// dpRank is what one DP rank reports after training.
type dpRank struct {
	losses []float64 // the global batch's mean loss at each step
	params map[string][]float64
	mem    Memory
}

// trainDP trains a tiny GPT for dpSteps steps on dp goroutine ranks, each on its
// contiguous slice of every step's global batch, with gradients averaged by the
// optimizer itself (reduce-scatter when distributed, all-reduce otherwise), the
// parameter all-gather overlapped with the next forward pass when overlap is set.
func trainDP(t *testing.T, dp int, distributed, overlap bool) []dpRank {
	t.Helper()
	cfg := tinyGPT(2, 16, dpVocab, dpSeq)
	out := make([]dpRank, dp)
	err := parallel.RunLocal(dp, func(c parallel.Comm) error {
		m, dev, err := newGPT(cfg, tensor.F64, parallel.Self())
		if err != nil {
			return err
		}
		sched, err := NewSchedule(ScheduleConfig{InitLR: 0, MaxLR: 0.02, MinLR: 0.002, WarmupSteps: 3, DecaySteps: dpSteps,
			Decay: DecayCosine, StartWD: 0.1, EndWD: 0.1})
		if err != nil {
			return err
		}
		// A small bucket size gives several buckets, each sharded over DP on its own.
		opt, err := New(m.Params(), Config{Schedule: sched, ClipGrad: 1, Distributed: distributed,
			Groups: Groups{DP: c}, BucketSize: 3000, OverlapParamGather: overlap})
		if err != nil {
			return err
		}
		if distributed && len(opt.Buffers()[0].Buckets) < 3 {
			return fmt.Errorf("want several buckets, got %d", len(opt.Buffers()[0].Buckets))
		}
		rows := dpGlobalBatch / dp
		r := dpRank{params: map[string][]float64{}, mem: opt.Memory()}
		for step := range dpSteps {
			s := dev.NewScope()
			opt.ZeroGrad()
			ids, labels := batch(dev, step, c.Rank()*rows, rows, dpSeq, dpVocab)
			loss := tensor.Scalar(dev, tensor.F64, forwardBackward(m, opt, ids, labels, 1))
			if err := c.AllReduce(context.Background(), loss, parallel.Avg); err != nil {
				return err
			}
			r.losses = append(r.losses, loss.Item())
			if _, err := opt.Step(context.Background()); err != nil {
				return err
			}
			s.Close()
		}
		if err := opt.FinishParamGather(); err != nil {
			return err
		}
		for _, p := range m.Params() {
			r.params[p.Name] = tensor.ToSlice[float64](p.Tensor)
		}
		out[c.Rank()] = r
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestDistributedOptimizerEqualsSingleRank trains with the distributed optimizer over
// DP = 2 and 4 (and plain data parallelism over DP = 2) and compares with AdamW on one
// rank that sees the whole global batch.
func TestDistributedOptimizerEqualsSingleRank(t *testing.T) {
	ref := trainDP(t, 1, false, false)[0]
	require.Less(t, ref.losses[dpSteps-1], ref.losses[0]-0.3, "the model trains")
	for _, tc := range []struct {
		dp          int
		distributed bool
	}{{2, true}, {4, true}, {2, false}} {
		t.Run(fmt.Sprintf("dp%d-distributed-%v", tc.dp, tc.distributed), func(t *testing.T) {
			for r, got := range trainDP(t, tc.dp, tc.distributed, false) {
				// Each rank averages its own rows and DP averages the ranks: float64 sums in
				// another order, ~1e-16 relative per step. Adam's m/√v turns that into
				// absolute differences up to ~1e-13 in parameters near zero after 20 steps.
				require.InDeltaSlice(t, ref.losses, got.losses, 1e-12, "rank %d losses", r)
				for name, want := range ref.params {
					require.InDeltaSlice(t, want, got.params[name], 1e-12, "rank %d %s", r, name)
				}
				if tc.distributed {
					// Adam's state measured from the buffers: 1/DP of one rank's.
					require.Equal(t, ref.mem.State/int64(tc.dp), got.mem.State, "rank %d state bytes", r)
					require.Equal(t, ref.mem.Params, got.mem.Params, "parameters are not sharded")
				} else {
					require.Equal(t, ref.mem.State, got.mem.State)
				}
			}
		})
	}
}

// TestDistributedMixedPrecisionMemory checks the per-parameter memory of a bf16 model
// under the distributed optimizer: bf16 parameters (2 bytes) and gradients (2, where
// autograd accumulates), fp32 main gradients (4), and fp32 master weights and Adam
// moments (12) split over DP. Megatron's 18 → 6 + 12/DP has no bf16 gradient buffer: its
// hooks move each gradient into main_grad as it is produced; megago's autograd
// accumulates into the parameter's dtype, so the buffer costs 2 bytes more.
func TestDistributedMixedPrecisionMemory(t *testing.T) {
	for _, dp := range []int{1, 2, 4} {
		mems := make([]Memory, dp)
		var n int64
		err := parallel.RunLocal(dp, func(c parallel.Comm) error {
			m, _, err := newGPT(tinyGPT(1, 16, dpVocab, dpSeq), tensor.BF16, parallel.Self())
			if err != nil {
				return err
			}
			opt, err := New(m.Params(), Config{LR: 1e-3, Distributed: true, Groups: Groups{DP: c}})
			if err != nil {
				return err
			}
			mems[c.Rank()] = opt.Memory()
			if c.Rank() == 0 {
				n = int64(opt.Buffers()[0].Size())
			}
			return nil
		})
		require.NoError(t, err)
		for r, mem := range mems {
			require.Equal(t, Memory{Params: 2 * n, Grads: 2 * n, MainGrads: 4 * n, Master: 4 * n / int64(dp),
				State: 8 * n / int64(dp)}, mem, "dp %d rank %d", dp, r)
		}
	}
}

// TestDistributedBF16EqualsSingleRank gives every DP rank the same whole batch, so the
// averaged fp32 gradients equal one rank's exactly, (x + x)/2 = x, and the sharded fp32
// master weights, the bf16 copies written by the kernel and the all-gather must reproduce
// the single-rank bf16 run bit for bit.
func TestDistributedBF16EqualsSingleRank(t *testing.T) {
	run := func(dp int) [][]float64 {
		out := make([][][]float64, dp)
		err := parallel.RunLocal(dp, func(c parallel.Comm) error {
			m, dev, err := newGPT(tinyGPT(1, 16, dpVocab, dpSeq), tensor.BF16, parallel.Self())
			if err != nil {
				return err
			}
			opt, err := New(m.Params(), Config{LR: 1e-2, WeightDecay: 0.1, ClipGrad: 1, Distributed: true,
				Groups: Groups{DP: c}, BucketSize: 1000})
			if err != nil {
				return err
			}
			for step := range 5 {
				s := dev.NewScope()
				opt.ZeroGrad()
				ids, labels := batch(dev, step, 0, 4, dpSeq, dpVocab)
				forwardBackward(m, opt, ids, labels, 1)
				if _, err := opt.Step(context.Background()); err != nil {
					return err
				}
				s.Close()
			}
			out[c.Rank()] = paramValues(m.Params())
			return nil
		})
		require.NoError(t, err)
		for r := 1; r < dp; r++ {
			require.Equal(t, out[0], out[r], "dp %d: rank %d has other parameters than rank 0", dp, r)
		}
		return out[0]
	}
	ref := run(1)
	require.Equal(t, ref, run(2))
	require.Equal(t, ref, run(4))
}

// TestOverlapParamGather: with the all-gather of updated parameters left to the next
// forward pass (each parameter's BeforeForward hook waits for its bucket), training is
// bit-identical to gathering at the end of each step; between the step and the next
// forward pass the other ranks' shards still hold the previous values, until
// FinishParamGather.
func TestOverlapParamGather(t *testing.T) {
	want := trainDP(t, 2, true, false)
	got := trainDP(t, 2, true, true)
	for r := range want {
		require.Equal(t, want[r].losses, got[r].losses, "rank %d losses", r)
		require.Equal(t, want[r].params, got[r].params, "rank %d parameters", r)
	}

	err := parallel.RunLocal(2, func(c parallel.Comm) error {
		m, dev, err := newGPT(tinyGPT(2, 16, dpVocab, dpSeq), tensor.F64, parallel.Self())
		if err != nil {
			return err
		}
		opt, err := New(m.Params(), Config{LR: 0.1, Distributed: true, Groups: Groups{DP: c}, OverlapParamGather: true})
		if err != nil {
			return err
		}
		ids, labels := batch(dev, 0, c.Rank()*4, 4, dpSeq, dpVocab)
		forwardBackward(m, opt, ids, labels, 1)
		before := tensor.ToSlice[float64](opt.Buffers()[0].Params)
		if _, err := opt.Step(context.Background()); err != nil {
			return err
		}
		n := len(before) / 2 // one bucket: rank r updated its half
		other := (1 - c.Rank()) * n
		stale := tensor.ToSlice[float64](opt.Buffers()[0].Params)[other : other+n]
		if fmt.Sprint(stale) != fmt.Sprint(before[other:other+n]) {
			return fmt.Errorf("rank %d: the other rank's shard changed before the gather", c.Rank())
		}
		if err := opt.FinishParamGather(); err != nil {
			return err
		}
		if fmt.Sprint(tensor.ToSlice[float64](opt.Buffers()[0].Params)[other:other+n]) == fmt.Sprint(before[other:other+n]) {
			return fmt.Errorf("rank %d: FinishParamGather did not bring the other rank's update", c.Rank())
		}
		return nil
	})
	require.NoError(t, err)
}
