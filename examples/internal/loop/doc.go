// Package loop is the training loop that megago's example programs share. Before each
// iteration every rank agrees whether Ctrl-C asked any of them to stop
// (ranks.StopRequested), so that all stop after the same iteration; then comes one
// optimizer step over the global batch (train.Trainer.Step, each micro-batch with its
// dropout pass from train.PassFor), its progress line on rank 0, the checkpoint's
// bookkeeping with a save at --save-interval and after the last iteration, and a
// validation at --eval-interval and after the last iteration.
//
// What differs between the examples is given to a Loop as values: the forward step
// over an iteration's micro-batches (Forward), the validation and what it prints
// (Eval), and the saving (Save, a ckpt.Checkpointer's Saved). Batches reads an
// iteration's micro-batches from a data.Loader.
//
// # Reading order
//
// Loop and its Run, which returns a Result; Batches.
//
// # Errors
//
// A failed collective, data read, training step, save or validation ends Run with that
// error (a failed step's wrapped with its iteration); the Result then holds the
// iterations done before it.
package loop
