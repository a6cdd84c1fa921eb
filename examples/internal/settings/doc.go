// Package settings holds the settings megago's example programs share, named after
// Megatron-LM's flags (--num-layers, --tensor-model-parallel-size, --data-path, ...):
// Common registers them, parses them from the command line and from a JSON file given
// by --config (keys named like the flags, with hyphens or Megatron's underscores; flags
// override the file), checks them before any work starts, and derives what a run needs
// from them: the world layout (DP, micro-batches per step, model chunks per pipeline
// rank), the pipeline schedule, the optimizer with Megatron's learning-rate schedule,
// the dtype, the device, the data blend and the cache directory. A script ported from
// Megatron runs with its flags, and never differs silently: Megatron's removed flags are
// refused, and a run prints every setting whose value differs from Megatron's default.
//
// # Reading order
//
//   - flags.go: Common, Defaults, Register and Parse; --data-path takes Megatron's list of
//     words ("--data-path 0.3 A 0.7 B"), and so do the other list flags
//     (internal/listargs).
//   - check.go: Check, Error and NonNegative, then what the settings derive.
//   - device.go: the checks of --device and --distributed-backend (NCCL needs cuda).
//   - numbers.go: the checks of float settings (NonNegativeNumbers, PositiveNumbers,
//     Fractions: NaN and infinities are refused too) and Warnings.
//   - writable.go: CheckWritable, which probes --save and --out-dir before any work.
//   - megatron_flags.go: MegatronFlags, Megatron's further training flags and their
//     checks: --train-samples with --lr-decay-samples and --lr-warmup-samples (exclusive
//     with the iteration forms, as Megatron's validate_args asserts),
//     --rampup-batch-size, --mock-data (NoMockData for examples without one),
//     --recompute-activations (selective) and --recompute-method with
//     --recompute-num-layers (mapped to what nn recomputes, the rest refused),
//     --use-flash-attn (accepted: attention is fused), the per-split data paths, and
//     --data-cache-path with its alias --cache-dir; ParseBlend reads a --data-path list.
//   - samples.go: what they derive, as Megatron computes it: the iterations of
//     --train-samples (update_train_iters), the global batch and micro-batches of each
//     iteration of a ramp-up (RampupBatchsizeNumMicroBatchesCalculator: GlobalBatchAt,
//     MicrobatchesAt, ScheduleAt, ConsumedAt), the samples to build, and the
//     learning-rate schedule in samples (ScheduleIncrement: the schedule advances by
//     each iteration's global batch).
//   - removed.go: the flags Megatron removed (--warmup, --batch-size, ...), refused on the
//     command line and in --config files with their replacement.
//   - megatron_defaults.go: MegatronDefaults, the block the training loop prints at
//     start-up naming every setting that differs from Megatron's default.
//   - overlap.go: Megatron's data-parallel overlap flags (--overlap-grad-reduce,
//     --ddp-bucket-size, --overlap-param-gather), their checks, BucketSize and
//     TrainConfig. As on Megatron's command line, nothing overlaps by default (package
//     train's library default is the reverse); the bucket layout does not depend on the
//     overlap flags, so results are bit-identical with and without them.
//
// # Errors
//
// Every setting that cannot work is a message of Check, all of them reported together
// by Error, before any work starts (the integer sizes and the float values first: when
// one of them is wrong, the checks that build on them are not run); -help prints the
// usage and returns ErrHelp. A --save or --out-dir that cannot be written is
// CheckWritable's error. Settings that work but are likely mistakes (a --loss-scale
// below 1) are Warnings, which the training loop prints.
package settings
