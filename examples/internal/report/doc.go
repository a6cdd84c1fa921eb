// Package report is what megago's example programs show and write while they train: a
// progress line every --log-interval iterations (and a live bar on a terminal), metrics
// as JSON lines (metrics.jsonl), TensorBoard event files written without TensorFlow, and
// the loss curve as a PNG (loss.png).
//
// # Reading order
//
//   - report.go: Report (New, Printf, Step, Eval, Done, Close) and Options; Thousands and
//     Clock, the number formats of the progress lines.
//   - metrics.go: Metrics, the JSON-lines writer, and Record, a JSON object whose keys keep
//     their order.
//   - tensorboard.go: TB, the event-file writer (TFRecord framing, Event protocol buffers).
//   - plot.go: Curve, the loss plot (drawn by internal/plot).
//   - moe.go: MoE, a mixture-of-experts model's metrics of an iteration (load-balancing
//     and z losses, the tokens-per-expert spread), which Step writes beside the loss.
//   - memory.go: Memory, a rank's peak RSS and peak tensor bytes at the end of a run;
//     GatherMemory collects every rank's on every rank, Report.Memory prints one line a
//     rank and writes a final "memory" record to metrics.jsonl.
//
// # Invariants
//
// Only rank 0 reports: the other ranks hold a nil *Report, whose methods do nothing, so a
// training loop calls them unconditionally. A Report belongs to one goroutine. Files are
// flushed after every record, so TensorBoard and tail -f see a run while it trains, and
// a write that fails (a full disk) is known at once.
//
// # Errors
//
// New returns the errors of creating the output directory and files. The first failed
// write of metrics.jsonl or the event file is returned by Step and kept for Err, so
// that the training loop stops at once; Close returns the first error of writing the
// plot and closing the files.
package report
