package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"megago/data"
)

// config holds every setting of a run, named after Megatron's flags. Flags override
// the JSON file given by --config, which overrides the defaults.
type config struct {
	// Model.
	NumLayers, HiddenSize, NumAttentionHeads, FFNHiddenSize    int
	SeqLength, MaxPositionEmbeddings, MakeVocabSizeDivisibleBy int
	HiddenDropout, AttentionDropout, InitMethodStd             float64
	UntieEmbeddings                                            bool

	// Batches and iterations.
	MicroBatchSize, GlobalBatchSize, TrainIters int

	// Optimizer and precision.
	LR, MinLR                   float64
	LRDecayStyle                string
	LRDecayIters, LRWarmupIters int
	LRWarmupFraction            float64
	WeightDecay, ClipGrad       float64
	AdamBeta1, AdamBeta2        float64
	AdamEps                     float64
	BF16, FP16                  bool
	LossScale, InitialLossScale float64

	// Parallelism.
	TP, PP, LayersPerVirtualStage int
	SequenceParallel              bool
	RecomputeGranularity          string
	DistributedBackend            string
	DistributedOptimizer          bool
	Ranks                         int

	// Data.
	DataPath                            []string
	Split                               string
	TokenizerType, VocabFile, MergeFile string
	CacheDir                            string
	Seed                                uint64

	// Logging and evaluation.
	EvalInterval, EvalIters, LogInterval int
	TensorboardDir, OutDir               string

	// Text generation at the end.
	Prompt      string
	GenTokens   int
	Temperature float64
	TopK        int

	// Checkpoints (checkpoint.go).
	checkpointFlags

	// Derived by check: the world size, DP, micro-batches per step and model chunks per
	// pipeline rank.
	world, dp, microbatches, chunks int
	configFile                      string
	set                             map[string]bool // flags given on the command line or in the file
}

// newFlagSet registers every flag on c, with the example's defaults.
func newFlagSet(c *config) *flag.FlagSet {
	fs := flag.NewFlagSet("gpt", flag.ContinueOnError)
	fs.Usage = func() { usage(fs) }

	fs.IntVar(&c.NumLayers, "num-layers", 4, "transformer layers (L)")
	fs.IntVar(&c.HiddenSize, "hidden-size", 128, "hidden size (C)")
	fs.IntVar(&c.NumAttentionHeads, "num-attention-heads", 4, "attention heads (NH)")
	fs.IntVar(&c.FFNHiddenSize, "ffn-hidden-size", 0, "MLP hidden size (0: 4 × hidden size)")
	fs.IntVar(&c.SeqLength, "seq-length", 128, "tokens per sample (T)")
	fs.IntVar(&c.MaxPositionEmbeddings, "max-position-embeddings", 0, "learned positions (0: seq-length)")
	fs.IntVar(&c.MakeVocabSizeDivisibleBy, "make-vocab-size-divisible-by", 128, "pad the vocabulary to a multiple of this × TP")
	fs.Float64Var(&c.HiddenDropout, "hidden-dropout", 0, "dropout on hidden states (Megatron's default is 0.1; a short run sees each token about once)")
	fs.Float64Var(&c.AttentionDropout, "attention-dropout", 0, "dropout on attention probabilities")
	fs.Float64Var(&c.InitMethodStd, "init-method-std", 0.02, "std of the weight initialization")
	fs.BoolVar(&c.UntieEmbeddings, "untie-embeddings-and-output-weights", false, "give the output layer its own weight")

	fs.IntVar(&c.MicroBatchSize, "micro-batch-size", 4, "samples per micro-batch per data-parallel rank (B)")
	fs.IntVar(&c.MicroBatchSize, "batch-size", 4, "alias of --micro-batch-size")
	fs.IntVar(&c.GlobalBatchSize, "global-batch-size", 0, "samples per iteration over all ranks (0: micro-batch size × DP)")
	fs.IntVar(&c.TrainIters, "train-iters", 600, "iterations (optimizer steps)")

	fs.Float64Var(&c.LR, "lr", 2e-3, "peak learning rate")
	fs.Float64Var(&c.MinLR, "min-lr", 1e-4, "learning rate at the end of the decay")
	fs.StringVar(&c.LRDecayStyle, "lr-decay-style", "cosine", "constant, linear, cosine or inverse-square-root")
	fs.IntVar(&c.LRDecayIters, "lr-decay-iters", 0, "iterations over which the learning rate decays (0: train-iters)")
	fs.IntVar(&c.LRWarmupIters, "lr-warmup-iters", 0, "iterations of linear warmup")
	fs.Float64Var(&c.LRWarmupFraction, "lr-warmup-fraction", 0.05, "warmup as a fraction of lr-decay-iters (used when lr-warmup-iters is 0)")
	fs.Float64Var(&c.WeightDecay, "weight-decay", 0.1, "AdamW weight decay (not on biases and norms)")
	fs.Float64Var(&c.ClipGrad, "clip-grad", 1.0, "clip gradients to this global L2 norm (0: off)")
	fs.Float64Var(&c.AdamBeta1, "adam-beta1", 0.9, "AdamW β1")
	fs.Float64Var(&c.AdamBeta2, "adam-beta2", 0.95, "AdamW β2")
	fs.Float64Var(&c.AdamEps, "adam-eps", 1e-8, "AdamW ε")
	fs.BoolVar(&c.BF16, "bf16", false, "bfloat16 parameters and activations with fp32 master weights")
	fs.BoolVar(&c.FP16, "fp16", false, "float16 parameters and activations with fp32 master weights and loss scaling")
	fs.Float64Var(&c.LossScale, "loss-scale", 0, "constant fp16 loss scale (0: dynamic)")
	fs.Float64Var(&c.InitialLossScale, "initial-loss-scale", 1<<32, "initial dynamic fp16 loss scale")

	fs.IntVar(&c.TP, "tensor-model-parallel-size", 1, "tensor-parallel size (TP)")
	fs.IntVar(&c.PP, "pipeline-model-parallel-size", 1, "pipeline-parallel size (PP)")
	fs.IntVar(&c.LayersPerVirtualStage, "num-layers-per-virtual-pipeline-stage", 0, "layers per model chunk: the interleaved 1F1B schedule (0: plain 1F1B)")
	fs.BoolVar(&c.SequenceParallel, "sequence-parallel", false, "split activations along the sequence between TP regions")
	fs.StringVar(&c.RecomputeGranularity, "recompute-granularity", "", "activation recomputation: full or selective (default none)")
	fs.StringVar(&c.DistributedBackend, "distributed-backend", "tcp", "tcp (gloo is accepted as tcp) or nccl, for runs under megago launch")
	fs.BoolVar(&c.DistributedOptimizer, "use-distributed-optimizer", false, "shard optimizer state over data-parallel ranks (ZeRO-1)")
	fs.IntVar(&c.Ranks, "ranks", 1, "ranks to run as goroutines in this process (TP × PP × DP)")

	fs.Var((*dataPath)(&c.DataPath), "data-path", "indexed dataset prefixes, each optionally preceded by a blend weight: [W1] PREFIX1 [W2 PREFIX2 ...] (default: the Go standard library's sources)")
	fs.StringVar(&c.Split, "split", data.DefaultSplit, "train,valid,test proportions of the documents")
	fs.StringVar(&c.TokenizerType, "tokenizer-type", "gosource-bpe", "gosource-bpe, gpt2, GPT2BPETokenizer, NullTokenizer, ...")
	fs.StringVar(&c.VocabFile, "vocab-file", "", "vocabulary file of the tokenizer")
	fs.StringVar(&c.MergeFile, "merge-file", "", "BPE merges file of the tokenizer")
	fs.StringVar(&c.CacheDir, "cache-dir", "", "where the default corpus and dataset indices are cached (default: the user cache dir/megago)")
	fs.Uint64Var(&c.Seed, "seed", 1234, "random seed (initialization, dropout, data order)")

	fs.IntVar(&c.EvalInterval, "eval-interval", 200, "iterations between validation runs (0: only at the end)")
	fs.IntVar(&c.EvalIters, "eval-iters", 20, "global batches per validation run (0: no validation)")
	fs.IntVar(&c.LogInterval, "log-interval", 50, "iterations per progress line")
	fs.StringVar(&c.TensorboardDir, "tensorboard-dir", "", "TensorBoard event files (default: OUT-DIR/tensorboard)")
	fs.StringVar(&c.OutDir, "out-dir", "gpt.out", "where metrics.jsonl, loss.png and the TensorBoard files go")

	fs.StringVar(&c.Prompt, "prompt", "func (b *Buffer) ", "text to continue after training")
	fs.IntVar(&c.GenTokens, "gen-tokens", 100, "tokens to generate after training (0: none)")
	fs.Float64Var(&c.Temperature, "temperature", 0.7, "sampling temperature (0: greedy)")
	fs.IntVar(&c.TopK, "top-k", 40, "sample from the k most likely tokens (0: all)")

	c.checkpointFlags.register(fs)

	fs.StringVar(&c.configFile, "config", "", "JSON file of settings named like the flags (flags override it)")
	return fs
}

func usage(fs *flag.FlagSet) {
	fmt.Fprint(fs.Output(), `Usage: go run ./examples/gpt [flags]

Trains a GPT on the Go standard library's sources (or --data-path) and generates
text from --prompt. Run it on N in-process ranks with --ranks N, or on N processes
with megago launch -n N -- gpt [flags]. Flags:

`)
	fs.PrintDefaults()
}

// dataPath is --data-path: Megatron takes a list ("--data-path 0.3 A 0.7 B"); here the
// flag may be repeated, hold several space-separated words, or be followed by words
// that do not start with "-" (see splitListArgs).
type dataPath []string

func (d *dataPath) String() string { return strings.Join(*d, " ") }

func (d *dataPath) Set(s string) error {
	*d = append(*d, strings.Fields(s)...)
	return nil
}

// errHelp is returned for -h and --help, after the usage was printed.
var errHelp = flag.ErrHelp

// parseConfig returns the settings of args (and the --config file they name), checked
// against the world size: tcpWorld when the environment describes a TCP job, else
// --ranks. Every error is a usage error, found before any work starts.
func parseConfig(args []string, tcpWorld int, stdout io.Writer) (*config, error) {
	c := &config{}
	fs := newFlagSet(c)
	args = splitListArgs(args, "data-path")
	if file := configFileArg(args); file != "" {
		if err := loadConfigFile(fs, file); err != nil {
			return nil, err
		}
	}
	fs.SetOutput(io.Discard) // errors are returned, the usage printed only for -help
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return nil, errHelp
		}
		return nil, fmt.Errorf("%w (-help lists the flags)", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags start with -)", fs.Arg(0))
	}
	c.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { c.set[f.Name] = true })
	if err := c.check(tcpWorld); err != nil {
		return nil, err
	}
	return c, nil
}

// splitListArgs rewrites "--name a b c" (Megatron's nargs='*') into "--name=a b c".
func splitListArgs(args []string, name string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a != "-"+name && a != "--"+name {
			out = append(out, a)
			continue
		}
		var words []string
		for i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			i++
			words = append(words, args[i])
		}
		if len(words) == 0 {
			out = append(out, a) // let the flag package report the missing value
			continue
		}
		out = append(out, "--"+name+"="+strings.Join(words, " "))
	}
	return out
}

// configFileArg returns the value of --config in args, or "".
func configFileArg(args []string) string {
	for i, a := range args {
		switch {
		case a == "--":
			return ""
		case a == "-config" || a == "--config":
			if i+1 < len(args) {
				return args[i+1]
			}
		case strings.HasPrefix(a, "-config=") || strings.HasPrefix(a, "--config="):
			return a[strings.Index(a, "=")+1:]
		}
	}
	return ""
}

// loadConfigFile sets the flags of fs from a JSON object whose keys are flag names
// (hyphens or Megatron's underscores) and whose values are strings, numbers, booleans
// or, for data-path, lists.
func loadConfigFile(fs *flag.FlagSet, file string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	var m map[string]json.RawMessage
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return fmt.Errorf("--config %s: not a JSON object: %w", file, err)
	}
	for key, raw := range m {
		name := strings.ReplaceAll(key, "_", "-")
		f := fs.Lookup(name)
		if f == nil || name == "config" {
			return fmt.Errorf("--config %s: unknown key %q (keys are flag names, e.g. \"num-layers\")", file, key)
		}
		vals, err := jsonValues(raw)
		if err != nil {
			return fmt.Errorf("--config %s: key %q: %w", file, key, err)
		}
		for _, v := range vals {
			if err := fs.Set(name, v); err != nil {
				return fmt.Errorf("--config %s: key %q: %w", file, key, err)
			}
		}
	}
	return nil
}

// jsonValues returns a JSON scalar as the string a flag parses, or each element of a
// list.
func jsonValues(raw json.RawMessage) ([]string, error) {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	scalar := func(v any) (string, error) {
		switch v := v.(type) {
		case string:
			return v, nil
		case json.Number:
			return v.String(), nil
		case bool:
			return strconv.FormatBool(v), nil
		}
		return "", fmt.Errorf("want a string, number or boolean, got %s", raw)
	}
	if list, ok := v.([]any); ok {
		out := make([]string, len(list))
		for i, e := range list {
			s, err := scalar(e)
			if err != nil {
				return nil, err
			}
			out[i] = s
		}
		return out, nil
	}
	s, err := scalar(v)
	return []string{s}, err
}
