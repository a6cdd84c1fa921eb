// Package tune searches an example's hyperparameters: random, grid or model-based
// (TPE) sampling over a search space, early stopping by asynchronous successive halving (ASHA) on the
// validation loss at rungs of iterations, several trials at once, and a results file
// from which an interrupted search resumes. `megago tune` is its command line.
//
// In reading order:
//
//   - Space (space.go): the search space file, a JSON object of flags, each a range on a
//     log or linear scale or a list of values, checked as a whole before any trial runs.
//   - Sampler (sample.go): Random and Grid give trial id its settings, a pure function of
//     the seed and id; TPE (tpe.go, with its Parzen estimator in parzen.go) a function
//     of the seed, id and the rung results of the trials before it.
//   - Rungs and ASHA (asha.go): the iterations at which trials are compared, and the
//     deterministic state machine that decides which trial goes on.
//   - Program (runner.go): runs a segment of a trial (from one rung to the next) as a
//     process of an example, resuming the trial's checkpoint of the previous rung, and
//     checks with the example's --check-only that it accepts every extreme of the space.
//   - Search (search.go): the loop; the results file (journal.go); the outputs.
//
// # Trials and rungs
//
// Rungs are minIters·η^k below maxIters, then maxIters. Every trial runs with
// --train-iters maxIters, so its learning-rate schedule is the full run's, and stops
// at each rung (--exit-interval), where the example validates and saves. Of the trials
// that reached rung k, the best ⌊n_k/η⌋ are promoted: each continues from its own
// checkpoint of rung k (--load), and the examples' resume is exact, so a promoted
// trial's losses are those of a trial run without stopping. When the trial budget is
// spent and nothing runs, the best trial of the deepest rung is promoted until one
// reaches the last rung. With one rung (η = 1, or minIters = maxIters) every trial runs
// to the end: no early stopping.
//
// Choose the first rung (minIters) after the longest learning-rate warmup the space
// allows. A loss at a rung compares trials whose schedules are at different points: a
// trial still warming up looks worse than it will end, so a rung inside the warmup
// stops the long-warmup trials, however good, and a model-based sampler learns that
// bias. On the gpt example at hidden 256 (examples/gpt/results/tune-vs-grid.txt), the
// grid's best had warmup 0.2 of 150 iterations: rungs 17/51/150 stopped the trials near
// it at 17 (TPE's best 0.044 above the grid's), rungs 51/150 kept them (TPE's best
// 0.019 above, at 0.32 of the grid's iterations).
//
// # TPE
//
// TPE is a multivariate Tree-structured Parzen Estimator with Optuna's TPESampler
// defaults (its doc comment gives each rule): 10 startup trials drawn as Random draws
// them (Optuna's n_startup_trials; BOHB starts modelling after d+1 results and draws a
// third of its trials at random throughout, which a search of 30 trials cannot
// afford); observations ranked as Optuna ranks pruned trials, the deepest rung first,
// so that the good group holds the trials ASHA judged best at the deepest rung they
// reached; the best ⌈n/10⌉ (at most 25, at least 1, at most n-1) good (Optuna's gamma;
// BOHB's 15% is close); product kernels with a prior component, Scott's-rule bandwidth
// 0.2·n^(-1/(d+4)) clipped as Optuna clips it; 24 candidates. Optuna's defaults, not
// BOHB's, because BOHB fits one model per budget from that budget's results alone,
// with at least d+1 trials in each group, which leaves few results per model in a
// search of tens of trials; ranking across rungs, as Optuna does, uses every result.
//
// # Resuming
//
// Each decision (a new trial and its settings, a promotion) is appended to tune.jsonl
// and fsynced before its segment starts, and each result (a rung's loss, a failure)
// when it ends. Run again with the same settings, Search replays the file: decided
// segments that did not finish run again from their previous rung's checkpoint, and
// the search continues. With Parallel 1 the decisions depend only on the results in
// order, so an interrupted and resumed search decides exactly what an uninterrupted one
// does (a TPE trial's settings too: they depend on the results recorded before the
// trial started, which are the same); with more, the recorded decisions, every trial's
// settings among them, are replayed, never drawn again, and the next ones follow from
// the results in the order they were recorded.
//
// # Budgets
//
// MaxTrials stops starting new trials (promotions go on); MaxTime stops starting any
// segment after the time, and lets the running ones finish. Both count in this run of
// Search. MaxIterations (--max-total-iters) bounds the training iterations of the
// whole search, the replayed segments included, as a grid's compute is counted: a new
// trial or a promotion is decided only if it fits with every segment decided before
// it (run, running or failed), so a search can be held to a fraction of a grid. The
// count leaves out validation, which each rung adds.
//
// # Errors
//
// A bad search space, fixed flags the example refuses, or a results file of another
// search are errors before any trial runs, each naming the flag. A trial that fails
// (its process exits with an error, or writes no validation at its rung) is recorded
// as failed and the search goes on. Caller bugs (a Config without a Space) panic.
package tune
