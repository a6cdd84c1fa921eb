// Package optim trains []*param.Param (nn.Param): flat parameter and gradient buffers
// in Megatron's layout, the AdamW, Adam and SGD update rules as fused backend kernels,
// Megatron's learning-rate and weight-decay schedules, gradient clipping by the global
// norm across model-parallel ranks, mixed precision (bf16 or fp16 parameters with fp32
// master weights and fp32 gradient accumulation) with fp16 loss scaling, and the
// distributed optimizer (ZeRO-1: master weights and optimizer state sharded over
// data-parallel ranks). It works on parameters, never on a model.
//
// It imports tensor, parallel (the DP and model-parallel groups it reduces over) and
// nn/param (the Param type and its metadata) — not nn: nn.Param is an alias of
// param.Param, so the parameters of nn's layers and models are passed as they are.
//
// # Reading order
//
//   - buffer.go: Buffer and NewBuffers, the flat layout; Bucket, Entry.
//   - config.go: Config, the rules (AdamW, Adam, SGD), Multipliers, Groups (dense and
//     expert groups).
//   - optimizer.go: Optimizer (New, ZeroGrad, AccumulateGrads, ReduceBucket, Step,
//     FinishParamGather), StepResult, Memory; shard.go: the part of each bucket a rank
//     updates; gather.go: the parameter all-gather of the distributed optimizer,
//     overlapped with the next forward pass on request.
//   - clip.go: GradNorm and ClipGradNorm on plain gradients.
//   - scaler.go: LossScaler, DynamicScaler, ConstantScaler.
//   - schedule.go: Schedule and ScheduleConfig.
//   - state.go: State, StateTensor; Optimizer.StateDict and Load.
//
// A training step:
//
//	opt.ZeroGrad()
//	for each micro-batch {
//	    loss := ...                        // forward
//	    opt.ScaleLoss(loss).Backward()     // loss × the loss scale (fp16), else loss
//	    opt.AccumulateGrads()              // bf16/fp16: move the gradients into fp32
//	}
//	res, err := opt.Step(ctx)              // average over DP, check, clip, update
//
// # Flat buffers
//
// New (through NewBuffers) puts the parameters of each dtype into one contiguous buffer
// and makes every p.Tensor a view of it (values copied in) and p.Grad() a view of its
// gradient buffer, so backward accumulates into the buffer and layers, which reach their
// weights through the *param.Param, run unchanged. The layout is Megatron's DDP layout: the
// parameters in reverse order (roughly the order backward produces their gradients),
// each starting at a multiple of 64 elements, grouped into buckets of at least
// Config.BucketSize elements (one bucket by default) whose ends are multiples of
// lcm(DP, 128); the shared copy of a tied embedding gets a bucket of its own. Megatron pads
// only under its distributed optimizer; megago always pads, so the layout does not depend
// on that choice. Padding elements stay zero.
//
// Invariant: after New the optimizer owns the parameters' storage. Do not assign
// p.Tensor or call p.SetGrad afterwards; read and write values in place (CopyFrom).
//
// # Expert parameters
//
// Parameters of mixture-of-experts layers (param.Param.Expert: dim 0 is the expert index,
// split over the expert-parallel group) live in buffers of their own, after the dense
// ones (Buffer.Expert; one per dtype, padded for the expert-DP size), as Megatron-core
// keeps its expert_parallel_buffers, so that a model without experts keeps its layout.
// Every expert-DP rank holds the same experts, so their gradients are reduced over
// Groups.ExpertDP instead of DP, and the distributed optimizer shards their state over
// it. The reduction is an average over ExpertDP scaled by ExpertDP/DP (Megatron's
// expert_gradient_scaling_factor): a rank's expert gradient already sums the tokens that
// the ranks of its expert-TP × EP group routed to it, so over ExpertDP it must be summed
// and divided by DP, like the dense gradients' average. The gradient norm and the inf/nan
// check count every element once: the dense sums are reduced over MP (and DP under the
// distributed optimizer), the expert sums over ExpertMP (expert-TP × EP × PP; and
// ExpertDP), an expert parameter replicated over expert-TP (PartitionDim < 0) counted on
// expert-TP rank 0 only, and the two added, as Megatron's chained dense and expert
// optimizers combine their norms. Nil expert groups stand for the dense ones (the layout
// of expert-parallel size 1 and expert-TP = TP), and with ExpertMP and ExpertDP both nil
// the expert sums join the dense ones in a single reduction, so a model without experts
// makes the same collectives and computes the same bits as before.
//
// # Mixed precision
//
// BF16 and F16 parameters get F32 master weights (F32 and F64 parameters are their own
// masters) and an F32 main-gradient buffer beside the model-dtype gradient buffer.
// Megatron accumulates each gradient into fp32 main_grad from a hook as backward
// produces it; megago's autograd accumulates a leaf's gradient in the leaf's dtype, so
// the model-dtype buffer receives each backward pass and AccumulateGrads (one fused
// kernel: main += float32(grad); grad = 0) moves it into fp32. Called after every
// micro-batch, the sum over micro-batches is taken in fp32 as in Megatron; Step calls it
// for the last one. The bf16 buffer costs 2 bytes per parameter more than Megatron's 18
// (2 + 2 + 4 + 12, or 2 + 2 + 4 + 12/DP under the distributed optimizer). The update
// kernel writes the F32 master and its rounded model-dtype copy in the same pass.
//
// Activations follow the parameters' dtype (nn.Builder.DType). For fp16, ScaleLoss
// multiplies the loss (cast to F32 first, so the scaled value itself cannot overflow) by
// the Scaler's scale; Step divides the gradients by it inside the update kernel.
//
// # A step
//
// Step (1) reduces every bucket not yet reduced (ReduceBucket: fold into fp32, then
// average over DP: all-reduce, or reduce-scatter into this rank's shard under the
// distributed optimizer; a data-parallel wrapper can call ReduceBucket per bucket during
// backward to overlap it); (2) sums the squared main gradients of its shards in float64
// (one read pass); (3) all-reduces an inf/nan flag with MAX over the model-parallel group
// (and DP under the distributed optimizer; expert gradients over ExpertMP and ExpertDP,
// see Expert parameters), so every rank skips the same steps: with a
// Scaler the step is skipped and the scaler backs off, without one Step returns an error
// wrapping ErrNonFinite; either way parameters, state, Steps and Schedule are unchanged;
// (4) all-reduces the squared norm (SUM, same groups), counting TP-replicated
// parameters on TP rank 0 only and never the Shared copy of a tied embedding; (5) runs
// the fused update on each shard with the gradients multiplied by 1/loss-scale times the
// clipping coefficient max/(norm + 1e-6) when that is below 1 (no separate unscale or
// clip pass); (6) under the distributed optimizer all-gathers each bucket's parameters
// over DP; (7) advances the Schedule by one (by SetScheduleIncrement's n: Megatron's
// sample-counting schedule advances by the global batch). The gradient norm is computed every step,
// clipping or not: it is the inf/nan check and Megatron's logged grad norm. Config.SkipGradNorm
// leaves out steps (2)-(4) when there is neither clipping nor a loss scaler (PyTorch's optimizers,
// and Megatron's without --clip-grad, make neither): a non-finite gradient then reaches the
// parameters.
//
// Rules follow PyTorch: torch.optim.AdamW (decoupled decay p·(1 − lr·wd)), Adam (L2
// term in the gradient) and SGD (momentum, dampening, Nesterov), with PyTorch's bias
// correction lr/(1 − β1^t) · m / (√v/√(1 − β2^t) + ε). Weight decay and learning rate
// are per parameter: the base values (Config.LR/WeightDecay or the Schedule) times
// Multipliers; by default parameters marked NoWeightDecay (biases, norm weights: every
// 1-D parameter) get none, as in Megatron. The fused kernels take the shard's list of
// per-parameter segments, so each element is read and written once per step.
//
// Schedules are Megatron's OptimizerParamScheduler counted in optimizer steps (or in
// samples, with SetScheduleIncrement): the first
// update uses the learning rate at step 0 (InitLR when warming up), and a skipped step
// does not advance the schedule.
//
// # Distributed optimizer
//
// With Config.Distributed each bucket is cut into DP equal contiguous shards (bucket
// sizes are multiples of DP by the padding); rank r keeps master weights (when separate)
// and the rule's state only for the r-th shard of every bucket: 1/DP of the total, a
// contiguous 1/DP of the buffer when there is one bucket. Gradients are reduce-scattered
// (averaged) into the shard, the shard is stepped, and the parameters all-gathered.
// Both collectives run in place, as NCCL allows: the shard is the rank's slot of the
// bucket. Every DP rank must start from the same parameter values.
//
// With Config.OverlapParamGather (Megatron's --overlap-param-gather) Step leaves the
// all-gather to the next forward pass: New sets every parameter's BeforeForward hook
// (param.Param.SetBeforeForward, which nn's models call per layer, embedding and head),
// the first hook called starts a goroutine that gathers the buckets in forward order
// (the reverse of the layout: the embedding's bucket first), and each hook waits for its
// own bucket, so the gather of later layers overlaps the computation of earlier ones.
// The values are the same bit for bit. Until the forward pass has passed them, or
// FinishParamGather is called, parameters outside this rank's shards hold the previous
// step's values; ReduceBucket and Step call FinishParamGather first, so no two of the
// optimizer's collectives use the DP group at once. gather.go holds this machinery.
//
// Sequence-parallel parameters (Param.SequenceParallel) need their gradients all-reduced
// over TP (nn.ReduceSequenceParallelGrads) after backward and before AccumulateGrads or
// Step; the optimizer does not do it.
//
// # State
//
// StateDict returns per-parameter state tensors named
// optimizer.state.<exp_avg|exp_avg_sq|momentum_buffer|fp32_param>.<param name>, each with
// the parameter's TP region of the global tensor and the flat range of that region this
// rank holds (Megatron's flattened_range: the whole region unless the distributed
// optimizer split the parameter), as views of the live state, plus scalars (step count,
// loss scaler, schedule). A checkpoint saves every rank's entries and, to load at another
// layout, assembles for each rank the entries its StateDict names; Load checks and copies
// them.
//
// # Errors
//
// Configuration errors are returned by New and NewSchedule (Validate). Caller bugs
// (duplicate or cross-device parameters, kernel spans that do not match) panic with the
// values. Non-finite gradients without a scaler return ErrNonFinite; communication
// failures return the transport's error wrapped with what was being reduced.
//
// Shape letter: N, the element count of a flat buffer (padding included).
package optim
