package settings

import (
	"flag"
	"fmt"

	"megago/optim"
	"megago/train"
)

// Megatron's data-parallel overlap flags. --overlap-grad-reduce reduces each gradient
// bucket as soon as backward has completed it, during the rest of backward; without it
// (Megatron's default, and the examples') every bucket is reduced after backward.
// --overlap-param-gather, with the distributed optimizer, all-gathers the updated
// parameters bucket by bucket during the next forward pass instead of at the end of
// the step; Megatron requires --overlap-grad-reduce with it, and so does megago.
//
// --ddp-bucket-size is in elements (parameters), and defaults to Megatron's
// max(40000000, 1000000 × DP). Megatron puts all of a buffer's parameters in one bucket
// when not overlapping; megago keeps the bucket layout whatever the overlap flags,
// because the buckets decide the distributed optimizer's shards and the order in which
// the gradient norm is summed: so the overlap flags change when the collectives run,
// never the result, which is bit-identical with and without them. (Megatron also turns
// bucketing off on pipeline stages after the first; megago does not.) A model under
// 40M parameters per rank has one bucket per dtype by default.

// Megatron's default bucket size: max(defaultBucketElems, bucketElemsPerDP × DP).
const (
	defaultBucketElems = 40_000_000
	bucketElemsPerDP   = 1_000_000
)

// registerOverlap registers the overlap flags on fs, with c's values as their defaults.
func (c *Common) registerOverlap(fs *flag.FlagSet) {
	fs.BoolVar(&c.OverlapGradReduce, "overlap-grad-reduce", c.OverlapGradReduce,
		"reduce gradient buckets over DP during backward (default: after backward)")
	fs.IntVar(&c.DDPBucketSize, "ddp-bucket-size", c.DDPBucketSize,
		"parameters per data-parallel gradient bucket (default: max(40000000, 1000000 × DP))")
	fs.BoolVar(&c.OverlapParamGather, "overlap-param-gather", c.OverlapParamGather,
		"all-gather the distributed optimizer's updated parameters during the next forward pass "+
			"(needs --use-distributed-optimizer and --overlap-grad-reduce)")
}

// checkOverlap returns a message for each overlap setting that cannot work, in
// Megatron's words where it has them.
func (c *Common) checkOverlap() []string {
	var errs []string
	if c.Set["ddp-bucket-size"] && c.DDPBucketSize < 1 {
		errs = append(errs, fmt.Sprintf("--ddp-bucket-size must be at least 1, got %d", c.DDPBucketSize))
	}
	if c.OverlapParamGather && !c.DistributedOptimizer {
		errs = append(errs, "--overlap-param-gather only supported with distributed optimizer (--use-distributed-optimizer)")
	}
	if c.OverlapParamGather && !c.OverlapGradReduce {
		errs = append(errs, "Must use --overlap-param-gather with --overlap-grad-reduce")
	}
	return errs
}

// BucketSize returns the gradient bucket size in elements: --ddp-bucket-size, or
// Megatron's default for the run's DP size.
func (c *Common) BucketSize() int {
	if c.Set["ddp-bucket-size"] {
		return c.DDPBucketSize
	}
	return max(defaultBucketElems, bucketElemsPerDP*c.DP)
}

// overlapOptim sets the bucket size and the overlapped parameter all-gather of o, as
// far as checkOverlap accepts them (it reports the rest in the flags' words).
func (c *Common) overlapOptim(o *optim.Config) {
	o.BucketSize = max(c.BucketSize(), 0)
	o.OverlapParamGather = c.OverlapParamGather && c.DistributedOptimizer
}

// TrainConfig returns the trainer's configuration for optimizer o: the gradients are
// reduced during backward only with --overlap-grad-reduce.
func (c *Common) TrainConfig(o optim.Config) train.Config {
	return train.Config{Optim: o, NoOverlap: !c.OverlapGradReduce}
}
