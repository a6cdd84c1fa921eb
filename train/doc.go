// Package train runs 3-D parallel training steps (tensor × pipeline × data parallelism,
// with sequence parallelism and activation recomputation as construction-time choices of
// the model). It is where models, optimizers and communication meet: it splits a GPT's
// or BERT's layers into pipeline stages and virtual chunks, keeps a tied word
// embedding's two copies in sync over the embedding group, reduces gradients over DP
// bucket by bucket while backward still runs, and steps the optimizer.
//
// # Why a package of its own
//
// parallel works on tensors and must not import nn or optim (DESIGN.md); optim works on
// []*nn.Param and knows no schedule; nn knows no optimizer. The pipeline schedules
// (parallel.Pipeline), the gradient buckets' overlapped reduction (parallel.GradSync)
// and the flat buffers (optim.Buffer, Optimizer.ReduceBucket) are each usable alone;
// this package is the small amount of glue that needs all three: which parameters
// belong to which chunk (to arm the reduction at each chunk's last backward step),
// which bucket holds a tied embedding copy (held back until the embedding group has
// summed it), and the order of the steps after backward.
//
// # Reading order
//
//   - stage.go: ChunkLayers and Stages (Megatron's layer split: chunk v of stage r holds
//     L/(p·V) layers from v·L/V + r·L/(p·V)), NewGPTChunks, NewBERTChunks, NewT5 (which
//     rejects PP > 1: T5 runs with TP and DP only), Parts, GPTParts and BERTParts. They
//     call (or, for Parts, alias) their namesakes in package nn
//     (nn/pipeline_chunks.go, nn/parts.go), where package checkpoint finds them too.
//   - trainer.go: Trainer (New, Step, Eval, FinishGradSync) and StepResult; Config
//     (NoOverlap, Trace).
//   - forward.go: GPTForward and BERTForward, the forward-step functions the schedules
//     call (GPTDocumentsForward for micro-batches that carry each token's position and
//     document, nn.Documents), and PassFor and Trainer.PassFor, the per-micro-batch
//     Pass.
//
// # A step
//
//	mesh, _ := parallel.NewMesh(ctx, world, parallel.Sizes{TP: 2, PP: 2})
//	b := &nn.Builder{Dev: dev, DType: tensor.F32, RNG: tensor.NewRNG(1), TP: mesh.TP(),
//	    SequenceParallel: true, Recompute: nn.RecomputeSelective}
//	chunks, _ := train.NewGPTChunks(b, cfg, mesh, 2)         // V = 2 chunks per rank
//	tr, _ := train.New(ctx, mesh, dev, train.GPTParts(chunks), train.Config{Optim: optCfg})
//	for step := range steps {
//	    fwd := train.GPTForward(chunks, passOf(step), batchOf(step))
//	    res, err := tr.Step(ctx, parallel.Interleaved{M: 8, V: 2}, fwd)
//	}
//
// Step zeroes the gradients and runs the schedule. Each micro-batch's loss is divided by
// M; just before the last micro-batch's backward step through a chunk, the chunk's
// parameters are armed, and each gradient bucket of the optimizer's flat buffers is
// averaged over DP (all-reduce, or reduce-scatter under the distributed optimizer) as
// soon as backward has completed it. After the schedule, FinishGradSync waits for those
// reductions and, in Megatron's order, sums the tied embedding copies' gradients over the
// embedding group (before their DP average, so that the distributed optimizer's shards of
// the two copies need not line up), runs the remaining reductions, and sums the
// sequence-parallel parameters' gradients over TP. Then the optimizer clips by the
// global norm over the model-parallel group and updates. Step reports the mean loss,
// averaged over DP, on every rank.
//
// # Mixture of experts
//
// Expert parameters (nn.Param.Expert) need nothing of the Trainer's own: the optimizer
// lays them out in buffers of their own, which the same gradient buckets reduce over the
// expert-data-parallel group instead of DP (optim.Groups.ExpertDP, filled by
// optim.MeshGroups), and counts them in the gradient norm over the expert-model-parallel
// group. What the Trainer adds: every micro-batch's Pass carries LossScale, the factor
// backward receives its loss with, 1/M times the loss scaler's scale (Trainer.PassFor;
// the package-level PassFor, which knows no scaler, gives 1/M), so that the auxiliary
// load-balancing losses a MoE layer adds inside the model get the main loss's scaling,
// as Megatron's MoEAuxLossAutoScaler does; and after each optimizer step, skipped or
// not, the routers' expert biases are updated from the tokens routed during the step
// (aux-loss-free balancing, as Megatron's finalize_model_grads does).
// TestMoE3DMatrix trains a GPT with MoE layers under EP, expert-TP with sequence
// parallelism, PP and DP, both dispatchers, with and without capacity dropping, to the
// single rank's losses, gradients, parameters and expert biases.
//
// # Overlap
//
// Two communications can overlap computation, as in Megatron, and neither changes a
// bit of the result (TestOverlapBitIdentical; TestOverlapTrace reads the overlap off
// the parallel trace):
//
//   - the gradient reduction overlaps backward (above), unless Config.NoOverlap. This is
//     the library's default; Megatron's command line reduces after backward unless
//     --overlap-grad-reduce, and megago's examples follow that (package
//     examples/internal/settings);
//   - with the distributed optimizer and optim.Config.OverlapParamGather, the updated
//     parameters are all-gathered during the next step's forward passes rather than at
//     the end of the step (Megatron's --overlap-param-gather): the optimizer owns the
//     gather, and nn's models wait for each bucket before a layer reads it (the
//     parameters' BeforeForward hooks). Eval completes the gather first; anything else
//     reading the parameters between steps (a checkpoint: checkpoint.Save does it)
//     calls Optimizer().FinishParamGather() first.
//
// Config.Trace records the forward and backward steps, each bucket's reduction
// (parallel.EventReduce) and each bucket's parameter all-gather (parallel.EventGather).
//
// # Invariants
//
// The result does not depend on the layout beyond floating-point summation order: at
// fixed TP, DP and sequence parallelism, any PP, schedule and recomputation give
// bit-identical losses and parameters on an untied model (TestGPT3DMatrix), because
// initialization and dropout are keyed by global coordinates (PassFor numbers samples
// globally) and only the placement of the arithmetic changes. A Trainer belongs to one
// rank; every rank of the mesh makes the same calls.
//
// # Errors
//
// Configuration errors (layers that do not split over p·V, a TP group that is not the
// mesh's, T5 with PP > 1, invalid optimizer settings) are returned by the constructors;
// an invalid schedule (parallel.Interleaved's constraints) by Step. Communication
// failures, including a failed collective inside autograd (a panic with a
// *parallel.Error, recovered), are returned by Step; after one the job must be aborted.
package train
