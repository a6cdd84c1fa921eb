package checkpoint

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"megago/internal/atomicfile"
	"megago/nn"
	"megago/tensor"
)

// MegatronExportOptions describe the Megatron-LM checkpoint ExportMegatron writes.
type MegatronExportOptions struct {
	// TP and PP are the tensor- and pipeline-parallel sizes to write (Megatron's
	// --target-tensor-parallel-size and --target-pipeline-parallel-size); 0 means 1.
	TP, PP int
	// Iteration is the iteration to record; 0 writes a "release" checkpoint, which
	// Megatron loads as weights only, with no optimizer or RNG state expected.
	Iteration int
	// ConsumedSamples is the data position recorded in the arguments.
	ConsumedSamples int
	// DType is the dtype to write the parameters in (F32, BF16, F16); 0 keeps each
	// tensor's own.
	DType tensor.DType
	// Local writes the names of Megatron-core's local layers (--transformer-impl local:
	// input_layernorm, pre_mlp_layernorm); by default Transformer Engine's, Megatron's
	// default (the norms fused into linear_qkv and linear_fc1, and an empty _extra_state
	// per Transformer Engine module).
	Local bool
	// TokenizerType is recorded as the arguments' tokenizer_type (Megatron compares it
	// with the loading run's when that run has a --vocab-file); "" records None.
	TokenizerType string
}

func (o MegatronExportOptions) sizes() (tp, pp int) { return max(o.TP, 1), max(o.PP, 1) }

// megatronStorageClass gives the torch storage class of each dtype ExportMegatron writes.
var megatronStorageClass = map[tensor.DType]string{tensor.F32: "FloatStorage", tensor.BF16: "BFloat16Storage",
	tensor.F16: "HalfStorage", tensor.F64: "DoubleStorage"}

// ExportMegatron writes the GPT m with global parameters global (megago's names, any
// vocabulary padding; from ReadGlobal, ImportHF or ImportMegatron) as a Megatron-LM
// legacy checkpoint in dir, which Megatron loads with --ckpt-format torch (and
// --use-checkpoint-args to take the model's settings from it): for each TP rank t and
// pipeline stage p, dir/iter_NNNNNNN/mp_rank_TT[_PPP]/model_optim_rng.pt (dir/release/...
// for iteration 0), a torch.save file holding {"args": an argparse.Namespace with the
// model's arguments, "checkpoint_version": 3.0, "iteration", "model": the rank's state
// dict with Megatron-core's names, "num_floating_point_operations_so_far": 0}, then
// dir/latest_checkpointed_iteration.txt. Tensors are split as Megatron splits them
// (megatronLayout); the vocabulary is padded with zero rows to Megatron's padded size at
// TP. It returns what the loading Megatron run must be told (flags it does not read from
// the checkpoint). A model Megatron-core cannot express, a layout that does not divide
// the model, or an existing iteration directory is an error.
func ExportMegatron(dir string, m Model, global map[string]*tensor.Tensor, opts MegatronExportOptions) ([]string, error) {
	cfg, err := m.GPTConfig()
	if err != nil {
		return nil, fmt.Errorf("checkpoint: Megatron export takes a GPT: %w", err)
	}
	cfg.TransformerConfig = cfg.TransformerConfig.Defaults()
	tp, pp := opts.sizes()
	if err := megatronExportable(cfg, tp, pp); err != nil {
		return nil, err
	}
	if _, ok := megatronStorageClass[opts.DType]; !ok && opts.DType != 0 {
		return nil, fmt.Errorf("checkpoint: Megatron export in %v: want F32, BF16, F16 or F64", opts.DType)
	}
	var present int64
	for _, t := range global {
		present += int64(t.Numel())
	}
	if err := m.checkSize(present, "the tensors given"); err != nil {
		return nil, err
	}
	conv, err := m.Converter()
	if err != nil {
		return nil, err
	}
	if err := fitVocab(m, conv, global, &global); err != nil {
		return nil, err
	}
	if err := checkComplete(m, global); err != nil {
		return nil, fmt.Errorf("checkpoint: Megatron export: %w", err)
	}
	padded := nn.PaddedVocab(cfg.Vocab, cfg.VocabMultiple, tp)
	dtype := opts.DType
	if dtype == 0 {
		dtype = global["embedding.word.weight"].DType()
	}
	if _, ok := megatronStorageClass[dtype]; !ok {
		return nil, fmt.Errorf("checkpoint: Megatron export of %v tensors: want F32, BF16, F16 or F64", dtype)
	}
	layout := megatronLayout(cfg, !opts.Local)
	whole := megatronWhole(layout, global, cfg.Vocab, padded, dtype)
	if err := writeMegatronRanks(dir, layout, whole, cfg, opts, megatronExportArgs(cfg, opts, dtype, padded)); err != nil {
		return nil, err
	}
	return megatronLoadNotes(cfg, opts), nil
}

// writeMegatronRanks writes every rank's file of the export in dir (see ExportMegatron),
// then the tracker file.
func writeMegatronRanks(dir string, layout []megatronEntry, whole map[string]*tensor.Tensor, cfg nn.GPTConfig,
	opts MegatronExportOptions, args pickleNamespace) error {
	tp, pp := opts.sizes()
	tracker := "release"
	if opts.Iteration > 0 {
		tracker = strconv.Itoa(opts.Iteration)
	}
	idir := filepath.Join(dir, "release")
	if opts.Iteration > 0 {
		idir = filepath.Join(dir, IterDir(opts.Iteration))
	}
	if _, err := os.Stat(idir); err == nil {
		return fmt.Errorf("checkpoint: %s already exists", idir)
	}
	for stage := range pp {
		for r := range tp {
			model := megatronRankState(layout, whole, cfg, stage, r, tp, pp)
			payload := pickleDict{{"args", args}, {"checkpoint_version", 3.0}, {"iteration", opts.Iteration},
				{"model", model}, {"num_floating_point_operations_so_far", 0}}
			stageArg := stage
			if pp == 1 {
				stageArg = -1 // mp_rank_TT
			}
			path := megatronRankFile(idir, r, stageArg)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return fmt.Errorf("checkpoint: %w", err)
			}
			if err := atomicfile.Write(path, func(w io.Writer) error { return writeTorchZip(w, "model_optim_rng", payload) }); err != nil {
				return fmt.Errorf("checkpoint: %w", err)
			}
		}
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, TrackerFile), []byte(tracker)); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// megatronWhole returns the whole tensors of layout by Megatron name, from megago's
// global tensors in dtype, the vocabulary rows padded with zeros to padded.
func megatronWhole(layout []megatronEntry, global map[string]*tensor.Tensor, vocab, padded int, dtype tensor.DType) map[string]*tensor.Tensor {
	whole := map[string]*tensor.Tensor{}
	for _, e := range layout {
		if e.extraState {
			continue
		}
		ts := make([]*tensor.Tensor, len(e.from))
		for i, name := range e.from {
			ts[i] = global[name].Detach().Cast(dtype)
			if e.vocab {
				ts[i] = padRowsTo(ts[i].Narrow(0, 0, vocab), padded)
			}
		}
		whole[e.name] = tensor.Concat(0, ts...) // SwiGLU's fc1: [gate; up]
	}
	return whole
}

// megatronExportable returns an error naming what of cfg Megatron-core's GPT cannot
// express, or what does not divide over tp × pp.
func megatronExportable(c nn.GPTConfig, tp, pp int) error {
	var bad []string
	switch {
	case c.PostLN:
		bad = append(bad, "post-norm layers")
	case c.Activation == nn.ReLU:
		bad = append(bad, "a ReLU MLP")
	case c.Activation == nn.GeLU && !c.Bias:
		bad = append(bad, "the tanh GeLU without biases (Megatron-core computes it only in its bias-GeLU fusion; without biases it applies the erf form)")
	case c.Position == nn.RelativePositions:
		bad = append(bad, "relative position buckets")
	case c.NoAttentionScale:
		bad = append(bad, "unscaled attention")
	}
	for _, d := range []struct {
		what  string
		n, by int
	}{{"layers", c.NumLayers, pp}, {"heads", c.Heads, tp}, {"query groups", c.KVHeads, tp}, {"MLP hidden size", c.FFNHidden, tp}} {
		if d.n%d.by != 0 {
			bad = append(bad, fmt.Sprintf("%d %s not divisible by %d", d.n, d.what, d.by))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("checkpoint: Megatron export at TP=%d PP=%d: %v", tp, pp, bad)
	}
	return nil
}

// megatronRankState returns TP rank r of stage's state dict: its shard of each tensor of
// the layout the stage holds, layers numbered from 0 on each stage, and on the last stage
// of a pipelined model with tied embeddings the word embedding's shard as output_layer
// (Megatron's copy of the shared weight).
func megatronRankState(layout []megatronEntry, whole map[string]*tensor.Tensor, c nn.GPTConfig, stage, r, tp, pp int) pickleOrderedDict {
	per := c.NumLayers / pp
	var out pickleOrderedDict
	for _, e := range layout {
		s, name := megatronStage(e, per, pp)
		if s != stage {
			continue
		}
		if e.extraState {
			out = append(out, pickleItem{name, &pickleTensor{Storage: "ByteStorage", Shape: []int{0}}})
			continue
		}
		out = append(out, pickleItem{name, megatronShardOf(whole[e.name], e.split, r, tp)})
	}
	if pp > 1 && stage == pp-1 && !c.Untied {
		out = append(out, pickleItem{"output_layer.weight", megatronShardOf(whole["embedding.word_embeddings.weight"], tpColumn, r, tp)})
	}
	return out
}

// megatronStage returns the stage holding entry e and its name there.
func megatronStage(e megatronEntry, per, pp int) (int, string) {
	switch {
	case e.layer >= 0:
		return e.layer / per, fmt.Sprintf("decoder.layers.%d.%s", e.layer%per, e.sub)
	case e.name == "embedding.word_embeddings.weight" || e.name == "embedding.position_embeddings.weight":
		return 0, e.name
	}
	return pp - 1, e.name
}

// megatronShardOf returns TP rank r's part of t as a torch tensor.
func megatronShardOf(t *tensor.Tensor, split tpSplit, r, tp int) *pickleTensor {
	switch split {
	case tpColumn:
		n := t.Dim(0) / tp
		t = t.Narrow(0, r*n, n)
	case tpRow:
		n := t.Dim(1) / tp
		t = t.Narrow(1, r*n, n)
	case tpGateUp: // t is [gate; up]: the rank holds its rows of each
		h := t.Dim(0) / 2
		n := h / tp
		t = tensor.Concat(0, t.Narrow(0, r*n, n), t.Narrow(0, h+r*n, n))
	}
	return &pickleTensor{Storage: megatronStorageClass[t.DType()], Shape: t.Shape().Clone(), Data: tensorBytes(t)}
}
