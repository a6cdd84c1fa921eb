// Package loop is the training loop that megago's example programs share. Before the
// first iteration it prints the settings that differ from Megatron-LM's defaults
// (settings.Common.MegatronDefaults) and the settings' warnings (Warnings); then each
// iteration is one optimizer step over the iteration's global batch (train.Trainer.Step,
// each micro-batch with its dropout pass from train.PassFor; the batch grows under
// --rampup-batch-size, settings.Common.MicrobatchesAt, and under --train-samples the
// learning-rate schedule advances by it), its progress line and metrics
// on rank 0, the checks that stop a diverging run, the decision whether to stop, the
// checkpoint's bookkeeping with a save at --save-interval, after the last iteration and
// when stopping, and a validation at --eval-interval and after the last iteration.
//
// What differs between the examples is given to a Loop as values: the forward step
// over an iteration's micro-batches (Forward), the validation and what it prints
// (Eval), and the saving (Save, a ckpt.Checkpointer's Saved). Batches reads an
// iteration's micro-batches from a data.Loader.
//
// # Stopping
//
// After each iteration every rank agrees, in one MAX all-reduce (ranks.AnyRank),
// whether any of them was asked to stop (Ctrl-C or SIGTERM cancel the context that
// ranks.Main gives the program) or has run past --exit-duration-in-mins, so that all
// stop after the same iteration; --exit-interval needs no agreement. A planned exit
// saves that iteration (with --save), a signal only with --exit-signal-handler, as in
// Megatron. Result says whether and why the run stopped early.
//
// # Divergence
//
// A training loss that is NaN or infinite stops the run before its iteration is saved
// (unless --no-check-for-nan-in-loss-and-grad), and so does an fp16 dynamic loss scaler
// that has nothing left to try: a step skipped for inf/NaN gradients at
// --min-loss-scale, after at least --hysteresis skips in a row (health). Weights that
// hold a NaN or an infinity are never saved (package ckpt). Every rank sees the same
// loss, skip and scale, so all stop together.
//
// # Mixture of experts
//
// For a model with MoE layers (Loop.MoE), every rank hands its layers' statistics since
// the last step (MoELayerStats, nn.MoEStats's) to one all-reduce over the world after
// each step, which gives rank 0 the iteration's metrics as Megatron's
// MoEMetricsTracker.report computes them: each loss divided by its coefficient and the
// micro-batches, summed over the pipeline stages and taken once per token group (nn's
// routers give every TP rank the whole TP group's value, the sum of the parts Megatron
// adds over TP, and global_load_balancing_loss the global batch's), averaged over DP,
// and the tokens per expert summed over the global batch (moe.go). Package report
// writes them.
//
// # Reading order
//
// Loop and its Run, which returns a Result; stop.go (stopping), health.go (divergence);
// moe.go (MoE metrics); Batches.
//
// # Errors
//
// A failed collective, data read, training step, metrics write, save or validation
// ends Run with that error (a failed step's, a failed metrics write's and a divergence
// wrapped with its iteration); the Result then holds the iterations done before it.
package loop
