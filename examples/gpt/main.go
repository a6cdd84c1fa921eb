// Command gpt pretrains a GPT with megago and generates text from it. With no flags it
// trains a small model on the Go standard library's sources, on the CPU, in a few
// minutes:
//
//	go run ./examples/gpt
//
// Its flags are Megatron-LM's (--num-layers, --tensor-model-parallel-size, --data-path,
// ...; see -help), also read from a JSON file (--config). It runs on one rank, on N
// goroutine ranks (--ranks N), or on N processes under megago launch:
//
//	go run ./examples/gpt --ranks 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
//	go build -o gpt ./examples/gpt && go run ./cmd/megago launch -n 4 -- ./gpt --tensor-model-parallel-size 2
//
// --context-parallel-size N splits each sample's sequence over N ranks (README.md:
// Context parallelism; each rank's part of every micro-batch in data.go).
//
// --device cuda trains on a GPU (each process of megago launch on the GPU of its
// LOCAL_RANK, goroutine ranks sharing one); --distributed-backend nccl joins the
// processes with NCCL. ranks.OpenDevices opens the devices before any work.
//
// This file reads top to bottom as a training loop of your own would: settings, data,
// ranks, then on each rank the mesh, the model, the optimizer, the data loader, the loop
// and text generation. The helpers sit beside it: flags.go and settings.go (settings),
// data.go (datasets), progress.go (what is printed) and sample.go (generation). What the
// examples share is in examples/internal: settings (Megatron's flags, --config files and
// their checks), corpus (the default corpus), loop (the training loop: the step,
// progress, save and validation cadence, stopping on Ctrl-C, SIGTERM and planned exits,
// and on a diverging loss), report (progress lines,
// metrics.jsonl, TensorBoard files, the loss curve), ckpt (--save, --load) and ranks (TCP
// processes, goroutine ranks).
package main

import (
	"cmp"
	"context"
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
	ranks.Main("gpt", func(ctx context.Context) (bool, error) {
		sum, err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
		return sum != nil && sum.Interrupted, err
	})
}

// summary is what a run reports to its caller (rank 0's view; every rank agrees on the
// losses).
type summary struct {
	loop.Result         // iterations, losses, whether interrupted
	ValidLoss   float64 // the last validation loss; NaN without validation
	Entropy     float64 // unigram entropy of the training tokens, nats
	Generated   string  // text generated after the prompt
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

	// Mesh: the TP, PP and DP groups, in Megatron's rank order (TP fastest), and the
	// experts' groups (EP, expert-TP, expert-DP) over the same ranks (moe.go).
	mesh, err := parallel.NewMesh(work, world, cfg.meshSizes())
	if err != nil {
		return nil, err
	}

	// Model: this rank's pipeline chunks, its TP shard of each layer. Weights are drawn
	// by global coordinates, so every layout and device starts from the same model.
	build := &nn.Builder{Dev: dev, DType: cfg.DType(), RNG: tensor.NewRNG(cfg.Seed).Named("init"), TP: mesh.TP(), CP: mesh.CP(),
		SequenceParallel: cfg.SequenceParallel, Recompute: cfg.Recompute(), Experts: expertGroups(mesh)}
	model := cfg.modelConfig(corp.tok.VocabSize())
	chunks, err := train.NewGPTChunks(build, model, mesh, cfg.Chunks)
	if err != nil {
		return nil, err
	}

	// Optimizer: AdamW over flat buffers, gradients averaged over DP (bucket by bucket
	// during backward), the pipeline schedule, and the loss scaler for fp16.
	ocfg, err := cfg.OptimConfig()
	if err != nil {
		return nil, err
	}
	trainer, err := train.New(work, mesh, dev, train.GPTParts(chunks), cfg.TrainConfig(ocfg))
	if err != nil {
		return nil, err
	}

	// Checkpoint: resume from --load (any layout), or take its weights.
	saver := ckpt.New(&cfg.Flags, mesh, checkpoint.GPTModel(model), train.GPTParts(chunks), trainer, cfg.Seed, cfg.GlobalBatchAt)
	first, err := saver.Load(work, corp.train.Len())
	if err != nil {
		return nil, err
	}

	// Data: this DP rank's micro-batches in Megatron's order, assembled ahead.
	sampler := data.NewPretrainingSampler(corp.train.Len(), saver.State.ConsumedSamples, cfg.MicroBatchSize, mesh.Coord().DP, cfg.DP)
	loader := data.NewLoader(work, sampler.Batches(), data.CollateGPT(corp.train), data.LoaderConfig{})
	defer loader.Close()

	params, err := ranks.CountParams(work, mesh, train.GPTParts(chunks).Params(), dev)
	if err != nil {
		return nil, err
	}
	var rep *report.Report
	if world.Rank() == 0 {
		if rep, err = newReport(stdout, cfg, cfg.GlobalBatchSize*cfg.SeqLength, cfg.flopsPerIteration(model)); err != nil {
			return nil, err
		}
		defer func() { err = cmp.Or(err, rep.Close()) }() // writes the loss curve
		header(rep, cfg, corp, model, params, dev)
		saver.Report(rep)
	}
	if cfg.EvalOnly {
		return evalOnly(work, cfg, corp, mesh, saver, trainer, chunks, dev, rep)
	}

	// The loop (package loop): one optimizer step per iteration over the global batch, a
	// checkpoint at --save-interval, a validation at --eval-interval, Ctrl-C, SIGTERM and
	// --exit-interval stopping every rank after the same iteration, and a diverging loss
	// stopping the run. What is GPT's: its batches and forward step,
	// its validation.
	sum := &summary{ValidLoss: math.NaN(), Entropy: corp.entropy()}
	l := loop.Loop{Settings: &cfg.Common, Mesh: mesh, Dev: dev, Trainer: trainer, Report: rep,
		Dropout: tensor.NewRNG(cfg.Seed).Named("dropout"), Save: saver.Saved, Start: start,
		MoE: cfg.moeLog(model, chunks), // the MoE layers' losses and expert loads (nil for a dense model)
		Forward: func(it int, pass func(micro int) *nn.Pass) (parallel.ForwardFunc, error) {
			batches, err := loop.Batches(loader, cfg.MicrobatchesAt(it))
			return train.GPTDocumentsForward(chunks, pass, gptBatches(batches).microBatches(dev, cfg.Docs.ResetPositionIDs, cpRankOf(mesh))), err
		},
		Eval: func(it int) (err error) {
			if sum.ValidLoss, err = validate(work, cfg, corp, mesh, trainer, chunks, dev); err == nil {
				eval(rep, it, sum.ValidLoss)
			}
			return err
		},
	}
	if sum.Result, err = l.Run(ctx, first); err != nil {
		return sum, err
	}
	sum.Wall = time.Since(start)
	finish(rep, sum, corp)

	// Every rank's peak RSS and tensor bytes, one line a rank on rank 0.
	mems, err := report.GatherMemory(work, world, dev)
	if err != nil {
		return sum, err
	}
	rep.Memory(mems)

	// Text generation from the trained model, unless interrupted.
	if !sum.Stopped() && cfg.GenTokens > 0 {
		if sum.Generated, err = generate(work, cfg, corp.tok, mesh, chunks, build); err != nil {
			return sum, err
		}
		printGenerated(rep, cfg.Prompt, sum.Generated)
	}
	// Leave together, so no process closes its connections while others still use them.
	return sum, world.Barrier(work)
}

// validate returns the mean loss over --eval-iters global batches of the validation
// split, the same batches every time, averaged over every rank.
func validate(ctx context.Context, cfg *config, corp *trainingData, mesh *parallel.Mesh, trainer *train.Trainer, chunks []*nn.GPT, dev *tensor.Device) (float64, error) {
	sampler := data.NewPretrainingSampler(corp.valid.Len(), 0, cfg.MicroBatchSize, mesh.Coord().DP, cfg.DP)
	collate := data.CollateGPT(corp.valid)
	pass := func(int) *nn.Pass { return nn.Eval(ctx) }
	total := 0.0
	for k := range cfg.EvalIters {
		batches := make(gptBatches, cfg.Microbatches)
		for i := range batches {
			var err error
			if batches[i], err = collate(ctx, sampler.Batch(k*cfg.Microbatches+i)); err != nil {
				return 0, err
			}
		}
		loss, err := trainer.Eval(ctx, cfg.Schedule(), train.GPTDocumentsForward(chunks, pass, batches.microBatches(dev, cfg.Docs.ResetPositionIDs, cpRankOf(mesh))))
		if err != nil {
			return 0, fmt.Errorf("validation: %w", err)
		}
		total += loss
	}
	return total / float64(cfg.EvalIters), nil
}

// evalOnly reports the validation loss of the loaded model (--eval-only).
func evalOnly(ctx context.Context, cfg *config, corp *trainingData, mesh *parallel.Mesh, c *ckpt.Checkpointer, trainer *train.Trainer, chunks []*nn.GPT, dev *tensor.Device, rep *report.Report) (*summary, error) {
	loss, err := validate(ctx, cfg, corp, mesh, trainer, chunks, dev)
	if err != nil {
		return nil, err
	}
	eval(rep, c.Loaded, loss)
	return &summary{ValidLoss: loss, Entropy: corp.entropy()}, mesh.World().Barrier(ctx)
}
