package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"megago/checkpoint"
	"megago/tensor"
)

func init() {
	register(command{
		name:    "convert",
		summary: "reshard a checkpoint, or convert it to or from Hugging Face and Megatron-LM",
		usage: `megago convert [flags] SRC DST

Convert reads the checkpoint SRC and writes DST:

  --from megago --to megago   reshard a megago checkpoint to -tp/-pp, optimizer
                              state included (any layout can load any other, but
                              a resharded copy reads fewer files per rank); an
                              MoE model's experts are written at expert-parallel
                              size 1, split over -tp, and load at any EP
  --from megago --to hf       export the model to a Hugging Face directory
                              (model.safetensors and config.json): GPT-2, Llama
                              (with Llama 3.1's rope scaling), Qwen2 (a Llama
                              with a QKV bias), Qwen3 (with query/key norms),
                              Mixtral, Qwen2-MoE or Qwen3-MoE (with experts),
                              BERT (BertForPreTraining) or T5; with
                              -max-shard-size, in shards with
                              model.safetensors.index.json
  --from hf                   import a Hugging Face directory (to megago: a
                              weights-only checkpoint at -tp/-pp): GPT-2, Llama,
                              Mistral (without sliding window), Qwen2, Qwen3,
                              Mixtral, Qwen2-MoE, Qwen3-MoE, BERT or T5, from
                              model.safetensors, a sharded
                              model.safetensors.index.json, pytorch_model.bin or
                              a sharded pytorch_model.bin.index.json
  --from megatron             import a Megatron-LM legacy checkpoint
                              (iter_N/mp_rank_TT[_PPP]/model_optim_rng.pt) of a
                              GPT (Megatron-core names with local or Transformer
                              Engine layers, or the legacy model's), merging its
                              tensor- and pipeline-parallel shards; replicated
                              tensors that differ between TP ranks are reported
  --to megatron               export a GPT to a Megatron-LM legacy checkpoint at
                              --target-tensor-parallel-size (-tp) and
                              --target-pipeline-parallel-size (-pp), as
                              Megatron's tools/checkpoint write it: Megatron
                              loads it with --ckpt-format torch (and
                              --use-checkpoint-args for the model's settings);
                              an iteration 0 source is written as a release

SRC and DST are directories; a megago or Megatron SRC is the directory holding
latest_checkpointed_iteration.txt. DST is created. What the Megatron run loading
an export must be told (flags it does not read from the checkpoint, such as
--no-bias-gelu-fusion for an erf GeLU) is printed after the summary.`,
		run: runConvert,
	})
}

// convertFlags are convert's settings.
type convertFlags struct {
	from, to       string
	tp, pp         int
	iteration      int
	vocab          int
	maxShard       string
	shardBytes     int64 // maxShard parsed
	src, dst       string
	layoutExplicit bool
	megatron       checkpoint.MegatronExportOptions // --to megatron: TP, PP and the iteration are set by run
	impl           string                           // --transformer-impl
	bf16, fp16     bool
}

func runConvert(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("convert", flag.ContinueOnError)
	var c convertFlags
	fs.StringVar(&c.from, "from", "megago", "source format: megago, hf or megatron")
	fs.StringVar(&c.to, "to", "megago", "destination format: megago, hf or megatron")
	fs.IntVar(&c.tp, "tp", 1, "tensor-parallel size of a megago or Megatron destination")
	fs.IntVar(&c.pp, "pp", 1, "pipeline-parallel size of a megago or Megatron destination")
	fs.IntVar(&c.tp, "target-tensor-parallel-size", 1, "the same as -tp (Megatron's tools/checkpoint name)")
	fs.IntVar(&c.pp, "target-pipeline-parallel-size", 1, "the same as -pp (Megatron's tools/checkpoint name)")
	fs.StringVar(&c.impl, "transformer-impl", "transformer_engine", "Megatron destination: the layers' names, transformer_engine (Megatron's default) or local")
	fs.StringVar(&c.megatron.TokenizerType, "tokenizer-type", "", "Megatron destination: the tokenizer_type to record (Megatron compares it when it has a --vocab-file)")
	fs.BoolVar(&c.bf16, "bf16", false, "Megatron destination: write the parameters in bfloat16")
	fs.BoolVar(&c.fp16, "fp16", false, "Megatron destination: write the parameters in float16")
	fs.IntVar(&c.iteration, "iteration", 0, "iteration of a megago or Megatron source (0: the latest)")
	fs.IntVar(&c.vocab, "vocab-size", 0, "Megatron source: the tokenizer's vocabulary size without padding (0: from its arguments, else the padded size)")
	fs.StringVar(&c.maxShard, "max-shard-size", "", "Hugging Face destination: the most bytes per safetensors shard, as transformers' max_shard_size (5GB, 500MiB, 1000000; empty: one file)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	megatronOnly := ""
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "tp", "pp", "target-tensor-parallel-size", "target-pipeline-parallel-size":
			c.layoutExplicit = true
		case "transformer-impl", "tokenizer-type", "bf16", "fp16":
			megatronOnly = f.Name
		}
	})
	if fs.NArg() != 2 {
		return &usageError{errors.New("convert takes a source and a destination directory")}
	}
	c.src, c.dst = fs.Arg(0), fs.Arg(1)
	if megatronOnly != "" && c.to != "megatron" {
		return &usageError{fmt.Errorf("-%s applies to a Megatron destination only", megatronOnly)}
	}
	if err := c.check(); err != nil {
		return &usageError{err}
	}
	return c.run(ctx, stdout, stderr)
}

// check reports flag combinations convert cannot do.
func (c *convertFlags) check() error {
	var err error
	if c.shardBytes, err = parseByteSize(c.maxShard); err != nil {
		return fmt.Errorf("-max-shard-size: %w", err)
	}
	switch {
	case c.from != "megago" && c.from != "hf" && c.from != "megatron":
		return fmt.Errorf("-from %q: want megago, hf or megatron", c.from)
	case c.to != "megago" && c.to != "hf" && c.to != "megatron":
		return fmt.Errorf("-to %q: want megago, hf or megatron", c.to)
	case c.to == "hf" && c.layoutExplicit:
		return errors.New("-tp and -pp apply to a Megatron or megago destination only")
	case c.impl != "transformer_engine" && c.impl != "local":
		return fmt.Errorf("-transformer-impl %q: want transformer_engine or local", c.impl)
	case c.bf16 && c.fp16:
		return errors.New("-bf16 and -fp16 exclude each other")
	case c.tp < 1 || c.pp < 1:
		return fmt.Errorf("-tp %d and -pp %d must be at least 1", c.tp, c.pp)
	case c.maxShard != "" && c.to != "hf":
		return errors.New("-max-shard-size applies to a Hugging Face destination only")
	case c.vocab != 0 && c.from != "megatron":
		return errors.New("-vocab-size applies to a Megatron source only")
	case c.iteration < 0 || c.iteration > 0 && c.from == "hf":
		return fmt.Errorf("-iteration %d: want ≥ 0, for a megago or Megatron source", c.iteration)
	case c.from == "megago" && c.to == "megago" && c.src == c.dst:
		return errors.New("resharding in place is not supported: give another destination")
	}
	return nil
}

// run does the conversion and prints a line about it, then what the import noticed or
// what a Megatron run loading the export must be told, on stderr.
func (c *convertFlags) run(ctx context.Context, stdout, stderr io.Writer) error {
	opts := checkpoint.WriteOptions{TP: c.tp, PP: c.pp, Iteration: c.iteration}
	if c.from == "megago" && c.to == "megago" {
		m, err := checkpoint.Reshard(ctx, c.src, c.dst, opts)
		if err != nil {
			return err
		}
		return c.report(stdout, m.Model, fmt.Sprintf("iteration %d", m.Iteration))
	}
	var (
		model    checkpoint.Model
		global   map[string]*tensor.Tensor
		it, used int
		what     string
		notes    []string
		err      error
	)
	switch c.from {
	case "megago":
		var m *checkpoint.Manifest
		if m, global, err = checkpoint.ReadGlobal(c.src, c.iteration); err != nil {
			return err
		}
		model, it, used = m.Model, m.Iteration, m.ConsumedSamples
		what = fmt.Sprintf("iteration %d saved at TP=%d PP=%d", m.Iteration, m.Layout.TP, m.Layout.PP)
	case "hf":
		if model, global, err = checkpoint.ImportHF(c.src); err != nil {
			return err
		}
	case "megatron":
		var info *checkpoint.MegatronInfo
		if model, global, info, err = checkpoint.ImportMegatron(c.src, checkpoint.MegatronOptions{Iteration: c.iteration, Vocab: c.vocab}); err != nil {
			return err
		}
		it, used, notes = info.Iteration, info.ConsumedSamples, info.Warnings
		what = fmt.Sprintf("iteration %d saved at TP=%d PP=%d in %v, vocabulary %d of %d padded", info.Iteration, info.TP, info.PP,
			info.DType, info.Vocab, info.PaddedVocab)
	}
	switch c.to {
	case "hf":
		err = checkpoint.ExportHFWith(c.dst, model, global, checkpoint.HFExportOptions{MaxShardSize: c.shardBytes})
	case "megatron":
		var loadNotes []string
		loadNotes, err = checkpoint.ExportMegatron(c.dst, model, global, c.megatronOptions(it, used))
		notes = append(notes, loadNotes...)
	default:
		_, err = checkpoint.WriteGlobal(ctx, c.dst, model, global, it, used, opts)
	}
	if err != nil {
		return err
	}
	if err := c.report(stdout, model, what); err != nil {
		return err
	}
	for _, n := range notes {
		if _, err := fmt.Fprintln(stderr, "convert: "+n); err != nil {
			return err
		}
	}
	return nil
}

// megatronOptions returns the options of a Megatron export of iteration it with used
// samples consumed.
func (c *convertFlags) megatronOptions(it, used int) checkpoint.MegatronExportOptions {
	o := c.megatron
	o.TP, o.PP, o.Iteration, o.ConsumedSamples, o.Local = c.tp, c.pp, it, used, c.impl == "local"
	switch {
	case c.bf16:
		o.DType = tensor.BF16
	case c.fp16:
		o.DType = tensor.F16
	}
	return o
}

// report prints what was converted.
func (c *convertFlags) report(w io.Writer, m checkpoint.Model, what string) error {
	layout := ""
	if c.to != "hf" {
		layout = fmt.Sprintf(" at TP=%d PP=%d", c.tp, c.pp)
	}
	if what != "" {
		what = " (" + what + ")"
	}
	_, err := fmt.Fprintf(w, "converted %s %s%s to %s %s%s: a %s model\n", c.from, c.src, what, c.to, c.dst, layout, m.Arch)
	return err
}

// parseByteSize reads a size as transformers' max_shard_size does: a number of bytes,
// optionally with a unit KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers of 1024).
// The empty string is 0.
func parseByteSize(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	num := strings.TrimRight(s, "BbKkMmGgIi")
	unit := strings.ToUpper(s[len(num):])
	mult, ok := map[string]float64{"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9,
		"KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30}[unit]
	x, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if !ok || err != nil || !(x > 0) || x*mult >= 1<<62 {
		return 0, fmt.Errorf("%q is not a positive size (a number of bytes, or with KB, MB, GB, KiB, MiB or GiB)", s)
	}
	return int64(x * mult), nil
}
