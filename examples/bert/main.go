// Command bert pretrains a BERT with megago — masked language modelling (MLM) and
// sentence order prediction (SOP, the binary head; --bert-no-binary-head leaves it out)
// — then fills in a masked line of Go with it. With no flags it trains a small model on
// the Go standard library's sources, on the CPU, in a few minutes:
//
//	go run ./examples/bert
//
// With --finetune-classify it instead loads a pretrained BERT (--load) and fine-tunes it,
// with a classification head, to tell which of a few standard-library packages a
// snippet of code comes from (classify.go):
//
//	go run ./examples/bert --save bert.ckpt
//	go run ./examples/bert --finetune-classify --load bert.ckpt
//
// Its flags are Megatron-LM's (--num-layers, --mask-prob, --short-seq-prob,
// --tensor-model-parallel-size, --data-path, ...; see -help), also read from a JSON file
// (--config). It runs on one rank, on N goroutine ranks (--ranks N) or on N processes
// under megago launch, with tensor, pipeline and data parallelism:
//
//	go run ./examples/bert --ranks 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
//	go build -o bert ./examples/bert && go run ./cmd/megago launch -n 2 -- ./bert --tensor-model-parallel-size 2
//
// --device cuda trains on a GPU (each process of megago launch on the GPU of its
// LOCAL_RANK, goroutine ranks sharing one); --distributed-backend nccl joins the
// processes with NCCL. ranks.OpenDevices opens the devices before any work.
//
// # Documents and sentences of Go
//
// BERT's samples are pairs of segments, each a run of consecutive sentences of one
// document: [CLS] A [SEP] B [SEP], with B swapped before A half of the time (the SOP
// target). Here a sentence is a line of a .go file — each non-blank line with its
// newline, blank lines kept with the line before them (corpus.Lines) — and a document is
// a top-level declaration with its doc comment, the package clause or the imports
// (corpus.Declarations: gofmt separates them by blank lines). Lines are what Go source is
// made of, and a declaration has an order that shows: its doc comment and signature come
// first, the body's closing brace last, a block's opening line before its indented
// lines. (With whole files as documents the segments of a sample would mostly be lines
// from the middle of some body, whose order a small model learns far more slowly.) The
// default corpus is tokenized with megago's Go-source BPE (8192 ids) extended with
// [CLS], [SEP], [MASK] and [PAD]; a --data-path of one's own must hold one sequence per
// sentence (megago preprocess -split-sentences).
//
// # What it reports
//
// On validation data: the MLM loss and accuracy (the masked tokens predicted exactly),
// beside the accuracy of always predicting the training split's most frequent token,
// and the SOP loss and accuracy beside the majority class's share. At the end it masks
// one line of --fill-text and fills it in, one token at a time, left to right.
//
// This file reads top to bottom as a training loop of your own would: settings, data,
// ranks, then on each rank the mesh, the model, the optimizer, the data loader and the
// loop. The helpers sit beside it: flags.go (settings), data.go (datasets and batches),
// eval.go (validation and its accuracies), fill.go (the masked line), progress.go
// (what is printed) and classify.go, classify_data.go (fine-tuning). What the examples
// share is in examples/internal.
package main

import (
	"cmp"
	"context"
	"io"
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
	ranks.Main("bert", func(ctx context.Context) (bool, error) {
		sum, err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
		return sum != nil && sum.Interrupted, err
	})
}

// summary is what a run reports to its caller (rank 0's view; every rank agrees on the
// losses).
type summary struct {
	loop.Result                 // iterations, losses, whether interrupted
	Valid       *validation     // the last validation; nil without
	Classify    *classification // --finetune-classify
	Filled      string          // the masked line as the model filled it in
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
	if cfg.FinetuneClassify {
		return runClassify(ctx, cfg, tcp, devs, stdout)
	}
	corp, err := loadData(ctx, cfg, ranks.Builder(tcp), stdout)
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
	var masked *fill // the line to fill in at the end
	if cfg.FillText != "" {
		if masked, err = newFill(cfg, corp.tok); err != nil {
			return nil, err
		}
	}

	// Ranks: processes of a TCP job, goroutines in this process, or just this one.
	var sum *summary
	err = ranks.Run(ctx, tcp, devs, stdout, func(world parallel.Comm, dev *tensor.Device, out io.Writer) error {
		s, err := pretrain(ctx, cfg, corp, masked, world, dev, out)
		if world.Rank() == 0 {
			sum = s
		}
		return err
	})
	return sum, err
}

// pretrain is one rank's run. Every rank of world calls it with the same settings.
func pretrain(ctx context.Context, cfg *config, corp *bertData, masked *fill, world parallel.Comm, dev *tensor.Device, stdout io.Writer) (_ *summary, err error) {
	// Collectives run under work, which Ctrl-C does not cancel: the loop stops between
	// iterations, on every rank at once (package loop).
	work := context.WithoutCancel(ctx)
	start := time.Now()

	// Mesh: the TP, PP and DP groups, in Megatron's rank order (TP fastest).
	mesh, err := parallel.NewMesh(work, world, parallel.Sizes{TP: cfg.TP, CP: cfg.CP.Size, PP: cfg.PP})
	if err != nil {
		return nil, err
	}

	// Model: this rank's pipeline chunks, its TP shard of each layer. Weights are drawn
	// by global coordinates, so every layout and device starts from the same model.
	build := &nn.Builder{Dev: dev, DType: cfg.DType(), RNG: tensor.NewRNG(cfg.Seed).Named("init"), TP: mesh.TP(),
		SequenceParallel: cfg.SequenceParallel, Recompute: cfg.Recompute()}
	model := cfg.modelConfig(corp.tok.VocabSize())
	chunks, err := train.NewBERTChunks(build, model, mesh, cfg.Chunks)
	if err != nil {
		return nil, err
	}

	// Optimizer: AdamW over flat buffers, gradients averaged over DP (bucket by bucket
	// during backward), the pipeline schedule, and the loss scaler for fp16.
	ocfg, err := cfg.OptimConfig()
	if err != nil {
		return nil, err
	}
	parts := train.BERTParts(chunks)
	trainer, err := train.New(work, mesh, dev, parts, cfg.TrainConfig(ocfg))
	if err != nil {
		return nil, err
	}

	// Checkpoint: resume from --load (any layout), or take its weights.
	saver := ckpt.New(&cfg.Flags, mesh, checkpoint.BERTModel(model), parts, trainer, cfg.Seed, cfg.GlobalBatchAt)
	first, err := saver.Load(work, corp.train.Len())
	if err != nil {
		return nil, err
	}

	// Data: this DP rank's micro-batches in Megatron's order, assembled ahead.
	sampler := data.NewPretrainingSampler(corp.train.Len(), saver.State.ConsumedSamples, cfg.MicroBatchSize, mesh.Coord().DP, cfg.DP)
	loader := data.NewLoader(work, sampler.Batches(), data.CollateSamples(corp.train), data.LoaderConfig{})
	defer loader.Close()

	params, err := ranks.CountParams(work, mesh, parts.Params(), dev)
	if err != nil {
		return nil, err
	}
	var rep *report.Report
	if world.Rank() == 0 {
		if rep, err = newReport(stdout, cfg, nn.PaddedVocab(model.Vocab, model.VocabMultiple, cfg.TP)); err != nil {
			return nil, err
		}
		defer func() { err = cmp.Or(err, rep.Close()) }() // writes the loss curve
		header(rep, cfg, corp, model, params, dev)
		saver.Report(rep)
	}
	v := &validator{cfg: cfg, corp: corp, mesh: mesh, trainer: trainer, chunks: chunks, dev: dev}
	if cfg.EvalOnly {
		return evalOnly(work, v, masked, saver.Loaded, rep)
	}

	// The loop (package loop): one optimizer step per iteration over the global batch, a
	// checkpoint at --save-interval, a validation at --eval-interval, Ctrl-C, SIGTERM and
	// --exit-interval stopping every rank after the same iteration, and a diverging loss
	// stopping the run. What is BERT's: its batches and forward step,
	// its validation.
	sum := &summary{}
	l := loop.Loop{Settings: &cfg.Common, Mesh: mesh, Dev: dev, Trainer: trainer, Report: rep,
		Dropout: tensor.NewRNG(cfg.Seed).Named("dropout"), Save: saver.Saved, Start: start,
		Forward: func(it int, pass func(micro int) *nn.Pass) (parallel.ForwardFunc, error) {
			batches, err := loop.Batches(loader, cfg.MicrobatchesAt(it))
			return train.BERTForward(chunks, pass, bertBatches(batches).tensors(dev, model.NoBinaryHead)), err
		},
		Eval: func(it int) (err error) {
			if sum.Valid, err = v.run(work); err == nil {
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

	// Fill in a masked line with the trained model, unless interrupted.
	if !sum.Stopped() {
		if sum.Filled, err = masked.fillIn(work, v, rep); err != nil {
			return sum, err
		}
	}
	// Leave together, so no process closes its connections while others still use them.
	return sum, world.Barrier(work)
}

// evalOnly reports the validation numbers of the loaded model and fills in the masked
// line (--eval-only).
func evalOnly(ctx context.Context, v *validator, masked *fill, loaded int, rep *report.Report) (*summary, error) {
	sum := &summary{}
	var err error
	if sum.Valid, err = v.run(ctx); err != nil {
		return sum, err
	}
	eval(rep, loaded, sum.Valid)
	if sum.Filled, err = masked.fillIn(ctx, v, rep); err != nil {
		return sum, err
	}
	return sum, v.mesh.World().Barrier(ctx)
}
