package settings

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"megago/parallel"
)

// Sample-based training (--train-samples) and the batch-size ramp-up
// (--rampup-batch-size), as Megatron's update_train_iters,
// get_optimizer_param_scheduler and RampupBatchsizeNumMicroBatchesCalculator compute
// them. (Megatron-LM's main branch replaced --rampup-batch-size by
// --step-batch-size-schedule in April 2026; megago follows the last release with the
// ramp-up.)

// rampup is --rampup-batch-size START INCREMENT SAMPLES.
type rampup struct {
	start, incr, samples int
	global               int   // the global batch after the ramp
	batches              []int // the global batch of each iteration while consumed ≤ samples
}

// batchAfter returns the global batch of the iteration that starts after consumed
// samples: Megatron's RampupBatchsizeNumMicroBatchesCalculator.update, whose float
// arithmetic it repeats.
func (r rampup) batchAfter(consumed int) int {
	if consumed > r.samples {
		return r.global
	}
	perIncrement := float64(r.samples) / float64((r.global-r.start)/r.incr)
	steps := int(float64(consumed) / perIncrement)
	return r.start + steps*r.incr
}

// parseRampup parses the three words of --rampup-batch-size for a global batch of
// global samples, with Megatron's checks.
func parseRampup(words []string, global int) (rampup, error) {
	if len(words) != 3 {
		return rampup{}, fmt.Errorf("--rampup-batch-size wants START INCREMENT SAMPLES, got %d values", len(words))
	}
	var v [3]int
	for i, w := range words {
		n, err := strconv.Atoi(w)
		if err != nil || n < 1 {
			return rampup{}, fmt.Errorf("--rampup-batch-size %s: %q is not a positive integer", strings.Join(words, " "), w)
		}
		v[i] = n
	}
	r := rampup{start: v[0], incr: v[1], samples: v[2], global: global}
	switch diff := global - r.start; {
	case diff <= 0:
		return rampup{}, fmt.Errorf("--rampup-batch-size start %d must be below --global-batch-size %d (there is nothing to ramp)", r.start, global)
	case diff%r.incr != 0:
		return rampup{}, fmt.Errorf("--rampup-batch-size: --global-batch-size %d minus start %d is not a multiple of the increment %d", global, r.start, r.incr)
	}
	for consumed := 0; consumed <= r.samples; {
		b := r.batchAfter(consumed)
		r.batches = append(r.batches, b)
		consumed += b
	}
	return r, nil
}

// checkSamples derives, once the layout is known, the iterations of a sample-based run
// and the ramp-up's batches, checking each batch against micro-batch size × DP (and
// the interleaved schedule's needs), and the recomputed layers.
func (c *Common) checkSamples() []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	c.ramp = rampup{}
	if c.Set["rampup-batch-size"] {
		r, err := parseRampup(c.RampupBatchSize, c.GlobalBatchSize)
		if err != nil {
			return []string{err.Error()}
		}
		c.ramp = r
		step := c.MicroBatchSize * c.DP
		for i, b := range r.batches {
			if b%step != 0 {
				bad("--rampup-batch-size: the global batch %d (iteration %d of the ramp) is not a multiple of micro-batch size %d × DP %d", b, i+1, c.MicroBatchSize, c.DP)
				return errs
			}
			if c.Chunks > 1 {
				if _, err := (parallel.Interleaved{M: b / step, V: c.Chunks}).Plan(c.PP, 0); err != nil {
					bad("--rampup-batch-size: the global batch %d: %v", b, err)
					return errs
				}
			}
		}
	}
	if c.SampleBased() {
		c.TrainIters = c.itersForSamples()
		if c.TrainIters < 1 {
			bad("--train-samples %d is less than one global batch of %d", c.TrainSamples, c.GlobalBatchSize)
		}
	}
	return append(errs, c.checkRecomputeLayers()...)
}

// itersForSamples returns the iterations of --train-samples (Megatron's
// update_train_iters): whole global batches, the ramp-up's first; a partial last
// batch is dropped.
func (c *Common) itersForSamples() int {
	if c.ramp.batches == nil {
		return c.TrainSamples / c.GlobalBatchSize
	}
	iters, consumed := 0, 0
	for consumed <= c.ramp.samples && consumed <= c.TrainSamples {
		consumed += c.ramp.batchAfter(consumed)
		iters++
	}
	if c.TrainSamples > consumed {
		iters += (c.TrainSamples - consumed) / c.GlobalBatchSize
	}
	return iters
}

// GlobalBatchAt returns the global batch of iteration it (0-based): --global-batch-size,
// or the ramp-up's batch for the samples consumed before it.
func (c *Common) GlobalBatchAt(it int) int {
	if it < len(c.ramp.batches) {
		return c.ramp.batches[it]
	}
	return c.GlobalBatchSize
}

// ConsumedAt returns the training samples consumed by iterations [0, it).
func (c *Common) ConsumedAt(it int) int {
	n := 0
	for i := range min(it, len(c.ramp.batches)) {
		n += c.ramp.batches[i]
	}
	return n + max(0, it-len(c.ramp.batches))*c.GlobalBatchSize
}

// MicrobatchesAt returns the micro-batches per DP rank of iteration it (0-based).
func (c *Common) MicrobatchesAt(it int) int {
	if it < len(c.ramp.batches) {
		return c.ramp.batches[it] / (c.MicroBatchSize * c.DP)
	}
	return c.Microbatches
}

// ScheduleAt returns the pipeline schedule of iteration it (0-based): Schedule with
// that iteration's micro-batches.
func (c *Common) ScheduleAt(it int) parallel.Schedule {
	if it >= len(c.ramp.batches) {
		return c.Schedule()
	}
	saved := *c
	saved.Microbatches = c.MicrobatchesAt(it)
	return saved.Schedule()
}

// TrainSamplesNeeded returns the training samples to build: --train-samples (or the
// samples of the iterations, when the ramp-up's last iteration runs past it), or
// --train-iters global batches.
func (c *Common) TrainSamplesNeeded() int {
	if c.SampleBased() {
		return max(c.TrainSamples, c.ConsumedAt(c.TrainIters))
	}
	return c.TrainIters * c.GlobalBatchSize
}

// ScheduleIncrement returns how far the learning-rate schedule advances after a
// successful iteration it (0-based): 1 when it counts iterations, the iteration's global
// batch when it counts samples (optim.Optimizer.SetScheduleIncrement).
func (c *Common) ScheduleIncrement(it int) int {
	if c.SampleBased() {
		return c.GlobalBatchAt(it)
	}
	return 1
}

// scheduleSteps returns the learning-rate warmup and decay in the schedule's unit:
// iterations (--lr-warmup-iters or --lr-warmup-fraction of --lr-decay-iters), or
// samples under --train-samples (--lr-warmup-samples or the fraction of
// --lr-decay-samples, which defaults to --train-samples), as Megatron's
// get_optimizer_param_scheduler sets them.
func (c *Common) scheduleSteps() (warmup, decay int) {
	if !c.SampleBased() {
		decay = c.LRDecayIters
		if decay == 0 {
			decay = c.TrainIters
		}
		return c.WarmupIters(), decay
	}
	decay = c.LRDecaySamples
	if decay == 0 {
		decay = c.TrainSamples
	}
	if c.Set["lr-warmup-samples"] {
		return c.LRWarmupSamples, decay
	}
	return int(math.Round(c.LRWarmupFraction * float64(decay))), decay
}
