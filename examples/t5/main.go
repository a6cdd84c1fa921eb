// Command t5 pretrains a T5 with megago by span corruption and fills in masked spans
// with it. With no flags it trains a small model on the Go standard library's sources,
// on the CPU, in a few minutes:
//
//	go run ./examples/t5
//
// Each line of Go source is a sentence (blank lines stay with the line before), each
// file a document; a sample is consecutive lines of one file. Span corruption is
// Megatron's: whole-token spans of geometric length (p = 0.2, at most 10) cover
// --mask-prob of the sample, each replaced in the encoder's input by a sentinel
// <extra_id_k>; the decoder produces every sentinel followed by its span, then EOS. The
// Go-source vocabulary has no sentinels, pad or EOS of its own, so --vocab-extra-ids
// sentinels and a pad token are appended to it (data.ForT5) and its end-of-text token
// serves as EOS; the decoder starts from pad, as Hugging Face's T5 does.
//
// Validation reports the loss and the span-token accuracy: at each token of the masked
// spans, teacher-forced, whether the model's most probable text token (not a sentinel,
// EOS or pad) is the right one — beside the accuracy of always predicting the most
// frequent span token, the best constant guess. (The argmax over every id is reported
// too: at a span token the model also weighs ending the span there, and that single
// outcome, the next sentinel, is often its likeliest.) At the end it fills the sentinels
// of a validation sample (--fill-sample) or of text of one's own (--fill-text, with
// <extra_id_0>, <extra_id_1>, ... in it) by greedy decoding (nn.GenerateT5: the encoder
// runs once, the decoder with a KV cache).
//
// Its flags are Megatron-LM's (--num-layers, --encoder-seq-length,
// --decoder-seq-length, --vocab-extra-ids, --mask-prob, --tensor-model-parallel-size,
// ...; see -help), also read from a JSON file (--config). T5 runs with tensor and data
// parallelism, not pipeline parallelism. It runs on one rank, on N goroutine ranks
// (--ranks N), or on N processes under megago launch:
//
//	go run ./examples/t5 --ranks 4 --tensor-model-parallel-size 2
//	go build -o t5 ./examples/t5 && go run ./cmd/megago launch -n 2 -- ./t5
//
// --device cuda trains on a GPU (each process of megago launch on the GPU of its
// LOCAL_RANK, goroutine ranks sharing one); --distributed-backend nccl joins the
// processes with NCCL. ranks.OpenDevices opens the devices before any work.
//
// This file reads top to bottom as a training loop of your own would: settings, data,
// ranks, then on each rank the mesh, the model, the optimizer, the data loader, the loop
// and the sentinel filling. The helpers sit beside it: flags.go (settings), data.go
// (the corpus and datasets), batch.go (micro-batches, the forward step, span-token
// scores), progress.go (what is printed) and fill.go (greedy filling).
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"megago/checkpoint"
	"megago/data"
	"megago/examples/internal/ckpt"
	"megago/examples/internal/loop"
	"megago/examples/internal/ranks"
	"megago/examples/internal/report"
	"megago/examples/internal/settings"
	"megago/nn"
	"megago/parallel"
	"megago/tensor"
	"megago/train"
)

func main() {
	ranks.Main("t5", func(ctx context.Context) (bool, error) {
		sum, err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
		return sum != nil && sum.Interrupted, err
	})
}

// summary is what a run reports to its caller (rank 0's view; every rank agrees on the
// losses).
type summary struct {
	loop.Result         // iterations, losses, whether interrupted
	Valid       score   // the last validation; NaN loss without validation
	Fill        *filled // the sentinel filling; nil without
	Wall        time.Duration
}

// run is the whole program: args are the command-line arguments, getenv reads the
// environment. It returns errHelp after printing the usage for -help.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) (*summary, error) {
	// Settings, all checked before any work. Under megago launch (or torchrun, srun) the
	// environment describes a TCP job and this process is one of its ranks.
	tcp, err := ranks.FromEnv(getenv)
	if err != nil {
		return nil, err
	}
	cfg, err := parseConfig(args, settings.TCPWorld(tcp), stdout)
	if err != nil {
		return nil, err
	}
	if cfg.StopAfterCheck(stdout) { // --check-only
		return nil, nil
	}
	stdout = ranks.Output(tcp, stdout) // rank 0 reports; errors still reach stderr
	// --save and --out-dir must be writable: found now rather than after training.
	if err := cfg.CheckWritable(ranks.Reports(tcp)); err != nil {
		return nil, err
	}
	// Devices (--device): one per rank of this process, opened before any work, so that
	// a missing GPU is reported at once.
	devs, err := ranks.OpenDevices(cfg.Device, cfg.NCCL(), tcp, cfg.World)
	if err != nil {
		return nil, err
	}
	defer devs.Close()

	// Data: the same samples on every rank. One process per host writes the cache.
	corp, err := loadCorpus(ctx, cfg, ranks.Builder(tcp), stdout)
	if err != nil {
		return nil, err
	}
	defer corp.Close()
	// --save: no other job may save there while this one runs.
	unlock, err := cfg.LockSave(ranks.Reports(tcp))
	if err != nil {
		return nil, err
	}
	defer unlock()
	if cfg.fills(corp) { // find a bad --fill-text or --fill-sample before training
		if _, _, err := fillInput(cfg, corp); err != nil {
			return nil, err
		}
	}

	// Ranks: processes of a TCP job, goroutines in this process, or just this one.
	var sum *summary
	err = ranks.Run(ctx, tcp, devs, stdout, func(world parallel.Comm, dev *tensor.Device, out io.Writer) error {
		s, err := pretrain(ctx, cfg, corp, world, dev, out)
		if world.Rank() == 0 {
			sum = s
		}
		return err
	})
	return sum, err
}

// pretrain is one rank's run. Every rank of world calls it with the same settings.
func pretrain(ctx context.Context, cfg *config, corp *trainingData, world parallel.Comm, dev *tensor.Device, stdout io.Writer) (_ *summary, err error) {
	// Collectives run under work, which Ctrl-C does not cancel: the loop stops between
	// iterations, on every rank at once (package loop).
	work := context.WithoutCancel(ctx)
	start := time.Now()

	// Mesh: the TP and DP groups, in Megatron's rank order (TP fastest).
	mesh, err := parallel.NewMesh(work, world, parallel.Sizes{TP: cfg.TP, CP: cfg.CP.Size})
	if err != nil {
		return nil, err
	}

	// Model: this rank's TP shard of each layer. Weights are drawn by global
	// coordinates, so every layout and device starts from the same model.
	build := &nn.Builder{Dev: dev, DType: cfg.DType(), RNG: tensor.NewRNG(cfg.Seed).Named("init"), TP: mesh.TP(),
		SequenceParallel: cfg.SequenceParallel, Recompute: cfg.Recompute()}
	model := cfg.modelConfig(corp.tok.VocabSize())
	m, err := train.NewT5(build, model, mesh)
	if err != nil {
		return nil, err
	}
	parts := train.Parts{Chunks: [][]*nn.Param{m.Params()}}

	// Optimizer: AdamW over flat buffers, gradients averaged over DP (bucket by bucket
	// during backward), and the loss scaler for fp16.
	ocfg, err := cfg.OptimConfig()
	if err != nil {
		return nil, err
	}
	trainer, err := train.New(work, mesh, dev, parts, cfg.TrainConfig(ocfg))
	if err != nil {
		return nil, err
	}

	// Checkpoint: resume from --load (any TP and DP), or take its weights.
	saver := ckpt.New(&cfg.Flags, mesh, checkpoint.T5Model(model), parts, trainer, cfg.Seed, cfg.GlobalBatchAt)
	first, err := saver.Load(work, corp.train.Len())
	if err != nil {
		return nil, err
	}

	// Data: this DP rank's micro-batches in Megatron's order, assembled ahead.
	sampler := data.NewPretrainingSampler(corp.train.Len(), saver.State.ConsumedSamples, cfg.MicroBatchSize, mesh.Coord().DP, cfg.DP)
	loader := data.NewLoader(work, sampler.Batches(), collateT5(corp.train, corp.sentinel, corp.special.EOS), data.LoaderConfig{})
	defer loader.Close()

	params, err := ranks.CountParams(work, mesh, parts.Params(), dev)
	if err != nil {
		return nil, err
	}
	var rep *report.Report
	if world.Rank() == 0 {
		if rep, err = newReport(stdout, cfg, model); err != nil {
			return nil, err
		}
		defer func() { err = cmp.Or(err, rep.Close()) }() // writes the loss curve
		header(rep, cfg, corp, model, params, dev)
		saver.Report(rep)
	}
	if cfg.EvalOnly {
		sum := &summary{}
		if sum.Valid, err = validate(work, cfg, corp, mesh, m, dev); err != nil {
			return nil, err
		}
		eval(rep, saver.Loaded, sum.Valid)
		return sum, fillSentinels(work, cfg, corp, mesh, m, build, rep, sum)
	}

	// The loop (package loop): one optimizer step per iteration over the global batch, a
	// checkpoint at --save-interval, a validation at --eval-interval, Ctrl-C, SIGTERM and
	// --exit-interval stopping every rank after the same iteration, and a diverging loss
	// stopping the run. What is T5's: its batches and forward step, its
	// validation.
	sum := &summary{Valid: score{Loss: math.NaN()}}
	l := loop.Loop{Settings: &cfg.Common, Mesh: mesh, Dev: dev, Trainer: trainer, Report: rep,
		Dropout: tensor.NewRNG(cfg.Seed).Named("dropout"), Save: saver.Saved, Start: start,
		Forward: func(it int, pass func(micro int) *nn.Pass) (parallel.ForwardFunc, error) {
			batches, err := loop.Batches(loader, cfg.MicrobatchesAt(it))
			return t5Forward(m, pass, batches, dev), err
		},
		Eval: func(it int) (err error) {
			if sum.Valid, err = validate(work, cfg, corp, mesh, m, dev); err == nil {
				eval(rep, it, sum.Valid)
			}
			return err
		},
	}
	if sum.Result, err = l.Run(ctx, first); err != nil {
		return sum, err
	}
	sum.Wall = time.Since(start)
	finish(rep, sum, corp)

	// Sentinel filling by the trained model, unless interrupted.
	if sum.Stopped() {
		return sum, world.Barrier(work)
	}
	return sum, fillSentinels(work, cfg, corp, mesh, m, build, rep, sum)
}

// fillSentinels fills the sentinels of --fill-text or --fill-sample (see config.fills)
// into sum and prints them, then waits for every rank: leaving together, no process
// closes its connections while others still use them.
func fillSentinels(ctx context.Context, cfg *config, corp *trainingData, mesh *parallel.Mesh, m *nn.T5, b *nn.Builder, rep *report.Report, sum *summary) error {
	if cfg.fills(corp) {
		var err error
		if sum.Fill, err = fill(ctx, cfg, corp, mesh, m, b); err != nil {
			return err
		}
		printFill(rep, cfg.FillSample, sum.Fill)
	}
	return mesh.World().Barrier(ctx)
}

// score is a validation run's result, over every rank.
type score struct {
	Loss float64 // mean of the micro-batches' mean losses
	// Accuracy is the model's on span tokens, its argmax over the text tokens (see
	// spanScore); AccuracyAny its argmax over the whole vocabulary, sentinels included.
	Accuracy, AccuracyAny float64
	// Baseline is the accuracy of always predicting Frequent, the most frequent of the
	// span tokens scored: the best any constant prediction can do on them.
	Baseline float64
	Frequent int32
	Spans    int // span tokens scored
}

// validate scores --eval-iters global batches of the validation split, the same
// batches every time: each DP rank its micro-batches, summed over DP.
func validate(ctx context.Context, cfg *config, corp *trainingData, mesh *parallel.Mesh, m *nn.T5, dev *tensor.Device) (score, error) {
	sampler := data.NewPretrainingSampler(corp.valid.Len(), 0, cfg.MicroBatchSize, mesh.Coord().DP, cfg.DP)
	collate := collateT5(corp.valid, corp.sentinel, corp.special.EOS)
	var sc spanScore
	err := recoverComm(func() error {
		for k := range cfg.EvalIters * cfg.Microbatches {
			b, err := collate(ctx, sampler.Batch(k))
			if err != nil {
				return err
			}
			sc.add(ctx, m, mesh.TP(), b, dev, corp.text)
		}
		return nil
	})
	if err != nil {
		return score{}, fmt.Errorf("validation: %w", err)
	}
	sums := tensor.FromSlice(dev, append([]float64{sc.loss, sc.batches, sc.spans, sc.correct, sc.correctAny}, sc.counts...), 5+len(sc.counts))
	defer sums.Release()
	if err := mesh.DP().AllReduce(ctx, sums, parallel.Sum); err != nil {
		return score{}, fmt.Errorf("validation: %w", err)
	}
	s := tensor.ToSlice[float64](sums)
	counts := s[5:]
	frequent := 0
	for id, n := range counts {
		if n > counts[frequent] {
			frequent = id
		}
	}
	return score{Loss: s[0] / s[1], Accuracy: s[3] / s[2], AccuracyAny: s[4] / s[2], Baseline: counts[frequent] / s[2],
		Frequent: int32(frequent), Spans: int(s[2])}, nil
}

// recoverComm runs fn, turning a panic with a *parallel.Error (a collective that failed
// inside the model's TP mappings) into an error.
func recoverComm(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			var pe *parallel.Error
			if e, ok := r.(error); ok && errors.As(e, &pe) {
				err = e
				return
			}
			panic(r)
		}
	}()
	return fn()
}
