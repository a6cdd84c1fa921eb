package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"time"

	"megago/checkpoint"
	"megago/examples/internal/loop"
	"megago/examples/internal/ranks"
	"megago/examples/internal/report"
	"megago/nn"
	"megago/parallel"
	"megago/parallel/tcp"
	"megago/tensor"
	"megago/train"
)

// Fine-tuning for classification (--finetune-classify): the BERT of --load, its
// pre-training heads replaced by a classification head (nn.BERTClassifier: the pooler,
// dropout and a linear layer over the classes; the pooler keeps its pretrained weights
// when the checkpoint has the binary head), trained on the labelled task of
// classify_data.go with the same optimizer, schedules and layouts as pretraining.

// classification is what a validation run of the classifier measures.
type classification struct {
	Micro, Loss      float64 // micro-batches and the sum of their mean losses
	Samples, Correct float64
	PerClass         []float64 // validation samples per class
	Accuracy         float64
}

// MeanLoss returns the mean validation loss.
func (c *classification) MeanLoss() float64 { return c.Loss / c.Micro }

// Baseline returns the share of the majority class: the accuracy of always predicting it.
func (c *classification) Baseline() float64 {
	return slices.Max(c.PerClass) / c.Samples
}

// pretrained reads the model configuration of the checkpoint in dir.
func pretrained(dir string) (nn.BERTConfig, error) {
	it, err := checkpoint.LatestIteration(dir)
	if err != nil {
		return nn.BERTConfig{}, fmt.Errorf("--load: %w", err)
	}
	m, err := checkpoint.ReadManifest(filepath.Join(dir, checkpoint.IterDir(it)))
	if err != nil {
		return nn.BERTConfig{}, fmt.Errorf("--load: %w", err)
	}
	cfg, err := m.Model.BERTConfig()
	if err != nil {
		return nn.BERTConfig{}, fmt.Errorf("--load %s: %w (--finetune-classify needs a BERT)", dir, err)
	}
	return cfg, nil
}

// runClassify is the program with --finetune-classify.
func runClassify(ctx context.Context, cfg *config, job *tcp.Config, devs *ranks.Devices, stdout io.Writer) (*summary, error) {
	model, err := pretrained(cfg.Load)
	if err != nil {
		return nil, err
	}
	model.Dropout, model.AttnDropout = cfg.HiddenDropout, cfg.AttentionDropout
	if cfg.SeqLength > model.MaxPosition {
		return nil, fmt.Errorf("--seq-length %d is more than the %d positions of the BERT of --load", cfg.SeqLength, model.MaxPosition)
	}
	task, err := loadClassify(ctx, cfg, ranks.Builder(job), stdout)
	if err != nil {
		return nil, err
	}
	defer task.Close()
	if v := task.tok.VocabSize(); v != model.Vocab {
		return nil, fmt.Errorf("--load %s was trained with a vocabulary of %d ids, not the %d of --tokenizer-type %s",
			cfg.Load, model.Vocab, v, cfg.TokenizerType)
	}
	var sum *summary
	err = ranks.Run(ctx, job, devs, stdout, func(world parallel.Comm, dev *tensor.Device, out io.Writer) error {
		s, err := finetune(ctx, cfg, model, task, world, dev, out)
		if world.Rank() == 0 {
			sum = s
		}
		return err
	})
	return sum, err
}

// classifier is one rank's classifier: its chunks and what trains them.
type classifier struct {
	cfg     *config
	task    *classifyData
	mesh    *parallel.Mesh
	chunks  []*nn.BERTClassifier
	trainer *train.Trainer
	dev     *tensor.Device
}

// newClassifier builds this rank's chunks of the classifier and loads the pretrained
// weights into them.
func newClassifier(ctx context.Context, cfg *config, model nn.BERTConfig, task *classifyData, mesh *parallel.Mesh, dev *tensor.Device) (*classifier, error) {
	b := &nn.Builder{Dev: dev, DType: cfg.DType(), RNG: tensor.NewRNG(cfg.Seed).Named("classifier-init"), TP: mesh.TP(),
		SequenceParallel: cfg.SequenceParallel, Recompute: cfg.Recompute()}
	stages, err := train.Stages(model.NumLayers, mesh.Sizes().PP, mesh.Coord().PP, cfg.Chunks)
	if err != nil {
		return nil, err
	}
	c := &classifier{cfg: cfg, task: task, mesh: mesh, dev: dev}
	var parts train.Parts
	var pretrainedParams []*nn.Param // those the checkpoint holds
	for _, st := range stages {
		m, err := nn.NewBERTClassifier(b, model, len(task.classes), st)
		if err != nil {
			return nil, err
		}
		c.chunks = append(c.chunks, m)
		parts.Chunks = append(parts.Chunks, m.Params())
		for _, p := range m.Params() {
			if !(m.Classifier != nil && (p == m.Classifier.Weight || p == m.Classifier.Bias ||
				model.NoBinaryHead && (p == m.Pooler.Weight || p == m.Pooler.Bias))) {
				pretrainedParams = append(pretrainedParams, p)
			}
		}
	}
	ocfg, err := cfg.OptimConfig()
	if err != nil {
		return nil, err
	}
	if c.trainer, err = train.New(ctx, mesh, dev, parts, c.cfg.TrainConfig(ocfg)); err != nil {
		return nil, err
	}
	st := &checkpoint.State{Model: checkpoint.BERTModel(model), Params: pretrainedParams}
	if _, err := checkpoint.Load(ctx, cfg.Load, mesh, st, checkpoint.LoadOptions{WeightsOnly: true}); err != nil {
		return nil, fmt.Errorf("loading the pretrained BERT: %w", err)
	}
	return c, nil
}

// forward returns the forward-step function over micro-batches of samples; on the last
// stage it returns the mean cross entropy, and with st it also counts (on TP rank 0) the
// correct predictions.
func (c *classifier) forward(pass func(int) *nn.Pass, batch func(micro int) []snippet, st *classification) parallel.ForwardFunc {
	return func(s parallel.Step) (*tensor.Tensor, error) {
		m, p := c.chunks[s.Chunk], pass(s.Micro)
		ss := batch(s.Micro)
		ids, attend, labels := c.task.tensors(c.dev, ss, c.cfg.SeqLength)
		hidden, logits := m.Forward(p, nn.BERTInput{IDs: ids, Attend: attend, Hidden: s.Input})
		if !s.Last {
			return hidden, nil
		}
		loss := m.Loss(logits, labels)
		if st != nil && c.mesh.Coord().TP == 0 {
			st.Micro++
			st.Loss += loss.Item()
			for i, pred := range argmax(logits.Detach(), len(c.task.classes)) {
				st.Samples++
				st.Correct += b2f(pred == ss[i].class)
				st.PerClass[ss[i].class]++
			}
		}
		return loss, nil
	}
}

// microBatches returns the micro-batches of iteration it of samples for this DP rank.
func (c *classifier) microBatches(samples []snippet, it int) func(micro int) []snippet {
	cfg := c.cfg
	return func(micro int) []snippet {
		start := cfg.ConsumedAt(it) + c.mesh.SampleOffset(cfg.MicroBatchSize, micro)
		return samples[start : start+cfg.MicroBatchSize]
	}
}

// validate returns the validation numbers, the same on every rank.
func (c *classifier) validate(ctx context.Context) (*classification, error) {
	st := &classification{PerClass: make([]float64, len(c.task.classes))}
	pass := func(int) *nn.Pass { return nn.Eval(ctx) }
	for k := range len(c.task.valid) / c.cfg.GlobalBatchSize {
		fwd := c.forward(pass, c.microBatches(c.task.valid, k), st)
		if _, err := c.trainer.Eval(ctx, c.cfg.Schedule(), fwd); err != nil {
			return nil, fmt.Errorf("validation: %w", err)
		}
	}
	f := append([]float64{st.Micro, st.Loss, st.Samples, st.Correct}, st.PerClass...)
	t := tensor.FromSlice(c.dev, f, len(f))
	defer t.Release()
	if err := c.mesh.World().AllReduce(ctx, t, parallel.Sum); err != nil {
		return nil, fmt.Errorf("validation: %w", err)
	}
	f = tensor.ToSlice[float64](t)
	st.Micro, st.Loss, st.Samples, st.Correct = f[0], f[1], f[2], f[3]
	copy(st.PerClass, f[4:])
	st.Accuracy = st.Correct / st.Samples
	return st, nil
}

// finetune is one rank's fine-tuning run.
func finetune(ctx context.Context, cfg *config, model nn.BERTConfig, task *classifyData, world parallel.Comm, dev *tensor.Device, stdout io.Writer) (_ *summary, err error) {
	work := context.WithoutCancel(ctx)
	start := time.Now()
	mesh, err := parallel.NewMesh(work, world, parallel.Sizes{TP: cfg.TP, CP: cfg.CP.Size, PP: cfg.PP})
	if err != nil {
		return nil, err
	}
	c, err := newClassifier(work, cfg, model, task, mesh, dev)
	if err != nil {
		return nil, err
	}
	var rep *report.Report
	if world.Rank() == 0 {
		o := report.Options{OutDir: cfg.OutDir, TensorboardDir: cfg.TensorboardDir, Iters: cfg.TrainIters,
			LogInterval: cfg.LogInterval, TokensPerIter: cfg.GlobalBatchSize * cfg.SeqLength,
			FLOPsPerIter: cfg.FLOPs(0), // no vocabulary projection
			Ranks:        cfg.World, Model: "BERT classifier", LossKey: "loss", LossTag: "classification loss"}
		if rep, err = report.New(stdout, o); err != nil {
			return nil, err
		}
		defer func() { err = cmp.Or(err, rep.Close()) }()
		classifyHeader(rep, cfg, model, task)
	}
	// The loop (package loop), without checkpoints: each iteration's forward step over
	// its slice of the training snippets, the classifier's validation.
	sum := &summary{}
	l := loop.Loop{Settings: &cfg.Common, Mesh: mesh, Dev: c.dev, Trainer: c.trainer, Report: rep,
		Dropout: tensor.NewRNG(cfg.Seed).Named("classifier-dropout"), Start: start,
		Forward: func(it int, pass func(micro int) *nn.Pass) (parallel.ForwardFunc, error) {
			return c.forward(pass, c.microBatches(task.train, it), nil), nil
		},
		Eval: func(it int) (err error) {
			if sum.Classify, err = c.validate(work); err == nil {
				classifyEval(rep, it, sum.Classify)
			}
			return err
		},
	}
	if sum.Result, err = l.Run(ctx, 0); err != nil {
		return sum, err
	}
	sum.Wall = time.Since(start)
	rep.Done(sum.Iterations, sum.Wall)
	if v := sum.Classify; v != nil {
		rep.Printf("validation: classification accuracy %.3f on %d snippets of %d unseen files; always predicting the majority class gives %.3f (+%.3f)\n",
			v.Accuracy, int(v.Samples), task.validFiles, v.Baseline(), v.Accuracy-v.Baseline())
	}
	rep.Files()
	h := task.classEntropy()
	rep.Reference(h, fmt.Sprintf("entropy of the classes %.2f", h))
	return sum, world.Barrier(work)
}

// classifyHeader prints what is about to run.
func classifyHeader(r *report.Report, cfg *config, model nn.BERTConfig, task *classifyData) {
	r.Printf("data: %s\n", task.about)
	counts := ""
	for i, p := range task.classes {
		counts += fmt.Sprintf(" %s %d", p, task.trainCounts[i])
	}
	r.Printf("task: which of %d packages a snippet of up to %d tokens comes from; %d training files (snippets:%s), %d validation files; the classes taken in turn\n",
		len(task.classes), cfg.SeqLength-2, task.trainFiles, counts, task.validFiles)
	r.Printf("model: the BERT of %s (%d layers, hidden %d, %d heads) with a classification head over %d classes\n",
		cfg.Load, model.NumLayers, model.Hidden, model.Heads, len(task.classes))
	r.Printf("layout: %d rank(s) = TP %d × PP %d × DP %d; %v; global batch %d\n",
		cfg.World, cfg.TP, cfg.PP, cfg.DP, cfg.Schedule(), cfg.GlobalBatchSize)
	r.Printf("optimizer: AdamW, lr %g → %g (%s, warmup %d), weight decay %g; dropout %g\n",
		cfg.LR, cfg.MinLR, cfg.LRDecayStyle, cfg.WarmupIters(), cfg.WeightDecay, model.Dropout)
	r.Printf("training %d iterations; output in %s\n", cfg.TrainIters, r.Dir())
}

// classifyEval records a validation run at iteration it.
func classifyEval(r *report.Report, it int, v *classification) {
	r.Eval(it, v.MeanLoss(), report.Value{Label: "loss", Format: "%.4f", Key: "loss", Tag: "classification loss validation", V: v.MeanLoss()},
		report.Value{Label: "accuracy", Format: "%.3f", Key: "accuracy", Tag: "accuracy validation", V: v.Accuracy},
		report.Value{Label: "majority baseline", Format: "%.3f", Key: "baseline", V: v.Baseline()})
}
