// Package ckpt is the checkpointing of megago's example programs, with Megatron's
// flags: --save and --save-interval write the whole training state (model, optimizer,
// schedule, loss scaler, data position) every so many iterations and at the end;
// --load resumes from it — at any TP, PP and DP, the checkpoint is resharded on
// loading; --no-load-optim leaves out the optimizer and its schedule, --no-load-rng takes
// this run's --seed instead of refusing another — --finetune takes only its weights (and
// starts at iteration 0), and --eval-only has the example report
// the loaded model's validation numbers. A run stopped by Ctrl-C or SIGTERM is saved
// only with --exit-signal-handler (package loop decides when to save); otherwise its
// last --save-interval checkpoint is the one to resume. Weights holding a NaN or an
// infinity are never saved. A job holds --save's job lock for its whole life
// (LockSave), so a second job given the same --save refuses to start.
//
// # Reading order
//
// Flags (Register, Check, LockSave), then Checkpointer (New, Load, Report, Saved), the per-rank
// state that package checkpoint saves and loads.
//
// # Errors
//
// Flag combinations that cannot work are returned by Check as messages; loading and
// saving return checkpoint's errors wrapped with what was being done.
package ckpt
