package settings

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"megago/data"
	"megago/examples/internal/ckpt"
	"megago/internal/listargs"
	"megago/internal/modelflags"
)

// Common holds the settings every example shares, named after Megatron's flags. Flags
// override the JSON file given by --config, which overrides the defaults. An example
// embeds it in its own settings, registers its own flags beside Register's, and adds its
// own checks to Check's.
type Common struct {
	// Model.
	NumLayers, HiddenSize, NumAttentionHeads, FFNHiddenSize    int
	SeqLength, MaxPositionEmbeddings, MakeVocabSizeDivisibleBy int
	HiddenDropout, AttentionDropout, InitMethodStd             float64

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
	MinLossScale                float64
	LossScaleWindow, Hysteresis int
	// NoCheckForNaN turns off the check that stops a run whose training loss is NaN
	// or infinite (Megatron's --no-check-for-nan-in-loss-and-grad).
	NoCheckForNaN bool

	// Parallelism.
	TP, PP, LayersPerVirtualStage int
	// CP is context parallelism (--context-parallel-size, --cp-comm-type,
	// --hierarchical-context-parallel-sizes): each sample's sequence split over CP.Size
	// ranks. Only the GPT example takes CP.Size > 1 (NoContextParallel).
	CP                   modelflags.CP
	SequenceParallel     bool
	RecomputeGranularity string
	DistributedBackend   string
	DistributedOptimizer bool
	Ranks                int

	// Data-parallel overlap (overlap.go): --overlap-grad-reduce, --ddp-bucket-size
	// (elements; 0: Megatron's default) and --overlap-param-gather.
	OverlapGradReduce, OverlapParamGather bool
	DDPBucketSize                         int
	// Device: the tensor backend every rank runs on, cpu or cuda (--device); checked
	// with --distributed-backend by checkDevice.
	Device string

	// Data.
	DataPath                            []string
	Split                               string
	TokenizerType, VocabFile, MergeFile string
	CacheDir                            string
	Seed                                uint64

	// Hugging Face and SentencePiece tokenizers (--tokenizer-model,
	// --tokenizer-hf-no-include-special-tokens, --legacy-tokenizer).
	TokenizerModel    string
	HFNoSpecialTokens bool
	LegacyTokenizer   bool
	NullVocabSize     int // NullTokenizer's and TikTokenizer's --vocab-size

	// TikTokenizer (--tiktoken-pattern, --tiktoken-num-special-tokens,
	// --tokenizer-special-tokens alias --tiktoken-special-tokens).
	TiktokenPattern          string
	TiktokenNumSpecialTokens int
	SpecialTokens            []string

	// Logging and evaluation.
	EvalInterval, EvalIters, LogInterval int
	TensorboardDir, OutDir               string

	// Checkpoints.
	ckpt.Flags

	// Megatron's further training flags (megatron_flags.go): --train-samples,
	// --rampup-batch-size, --mock-data, the recomputation shorthands, per-split paths.
	MegatronFlags

	// Planned exits: on SIGTERM (with ExitSignalHandler), every ExitInterval iterations,
	// after ExitDurationInMins minutes; each saves the iteration when --save is set.
	ExitSignalHandler  bool
	ExitInterval       int
	ExitDurationInMins float64

	// CheckOnly (--check-only) parses and checks the settings, says so and exits before
	// any work (no data, device or output directory is touched): how megago tune checks
	// that an example accepts every setting of a search space before any trial runs.
	CheckOnly bool

	// Derived by Check: the world size, DP (world / (TP·CP·PP)), micro-batches per step
	// and model chunks per pipeline rank.
	World, DP, Microbatches, Chunks int
	// Set holds the flags given on the command line or in the --config file.
	Set map[string]bool

	configFile string
}

// Defaults returns the settings of a small model that trains in minutes on a laptop's
// CPU (the GPT example's); examples change what they need before Register.
func Defaults() Common {
	return Common{NumLayers: 4, HiddenSize: 128, NumAttentionHeads: 4, SeqLength: 128, MakeVocabSizeDivisibleBy: 128,
		InitMethodStd: 0.02, MicroBatchSize: 4, TrainIters: 600,
		LR: 2e-3, MinLR: 1e-4, LRDecayStyle: "cosine", LRWarmupFraction: 0.05, WeightDecay: 0.1, ClipGrad: 1,
		AdamBeta1: 0.9, AdamBeta2: 0.95, AdamEps: 1e-8, InitialLossScale: 1 << 32, MinLossScale: 1,
		LossScaleWindow: 1000, Hysteresis: 2,
		TP: 1, PP: 1, CP: modelflags.CPDefaults(), DistributedBackend: "tcp", Ranks: 1,
		Split: data.DefaultSplit, TokenizerType: "gosource-bpe", Seed: 1234,
		TiktokenPattern: "v2", TiktokenNumSpecialTokens: data.DefaultTikTokenNumSpecial,
		EvalInterval: 200, EvalIters: 20, LogInterval: 50, OutDir: "out",
		Device: "cpu"}
}

// Register registers the common flags on fs, with c's values as their defaults.
// evalOnly says what --eval-only reports.
func (c *Common) Register(fs *flag.FlagSet, evalOnly string) {
	fs.IntVar(&c.NumLayers, "num-layers", c.NumLayers, "transformer layers (L)")
	fs.IntVar(&c.HiddenSize, "hidden-size", c.HiddenSize, "hidden size (C)")
	fs.IntVar(&c.NumAttentionHeads, "num-attention-heads", c.NumAttentionHeads, "attention heads (NH)")
	fs.IntVar(&c.FFNHiddenSize, "ffn-hidden-size", c.FFNHiddenSize, "MLP hidden size (0: 4 × hidden size)")
	fs.IntVar(&c.SeqLength, "seq-length", c.SeqLength, "tokens per sample (T)")
	fs.IntVar(&c.MaxPositionEmbeddings, "max-position-embeddings", c.MaxPositionEmbeddings, "learned positions (0: seq-length)")
	fs.IntVar(&c.MakeVocabSizeDivisibleBy, "make-vocab-size-divisible-by", c.MakeVocabSizeDivisibleBy, "pad the vocabulary to a multiple of this × TP")
	fs.Float64Var(&c.HiddenDropout, "hidden-dropout", c.HiddenDropout, "dropout on hidden states (Megatron's default is 0.1; a short run sees each token about once)")
	fs.Float64Var(&c.AttentionDropout, "attention-dropout", c.AttentionDropout, "dropout on attention probabilities")
	fs.Float64Var(&c.InitMethodStd, "init-method-std", c.InitMethodStd, "std of the weight initialization")

	fs.IntVar(&c.MicroBatchSize, "micro-batch-size", c.MicroBatchSize, "samples per micro-batch per data-parallel rank (B)")
	fs.IntVar(&c.GlobalBatchSize, "global-batch-size", c.GlobalBatchSize, "samples per iteration over all ranks (0: micro-batch size × DP)")
	fs.IntVar(&c.TrainIters, "train-iters", c.TrainIters, "iterations (optimizer steps)")

	fs.Float64Var(&c.LR, "lr", c.LR, "peak learning rate")
	fs.Float64Var(&c.MinLR, "min-lr", c.MinLR, "learning rate at the end of the decay")
	fs.StringVar(&c.LRDecayStyle, "lr-decay-style", c.LRDecayStyle, "constant, linear, cosine or inverse-square-root")
	fs.IntVar(&c.LRDecayIters, "lr-decay-iters", c.LRDecayIters, "iterations over which the learning rate decays (0: train-iters)")
	fs.IntVar(&c.LRWarmupIters, "lr-warmup-iters", c.LRWarmupIters, "iterations of linear warmup")
	fs.Float64Var(&c.LRWarmupFraction, "lr-warmup-fraction", c.LRWarmupFraction, "warmup as a fraction of lr-decay-iters (used when lr-warmup-iters is 0)")
	fs.Float64Var(&c.WeightDecay, "weight-decay", c.WeightDecay, "AdamW weight decay (not on biases and norms)")
	fs.Float64Var(&c.ClipGrad, "clip-grad", c.ClipGrad, "clip gradients to this global L2 norm (0: off)")
	fs.Float64Var(&c.AdamBeta1, "adam-beta1", c.AdamBeta1, "AdamW β1")
	fs.Float64Var(&c.AdamBeta2, "adam-beta2", c.AdamBeta2, "AdamW β2")
	fs.Float64Var(&c.AdamEps, "adam-eps", c.AdamEps, "AdamW ε")
	fs.BoolVar(&c.BF16, "bf16", c.BF16, "bfloat16 parameters and activations with fp32 master weights")
	fs.BoolVar(&c.FP16, "fp16", c.FP16, "float16 parameters and activations with fp32 master weights and loss scaling")
	fs.Float64Var(&c.LossScale, "loss-scale", c.LossScale, "constant fp16 loss scale (0: dynamic)")
	fs.Float64Var(&c.InitialLossScale, "initial-loss-scale", c.InitialLossScale, "initial dynamic fp16 loss scale")
	fs.Float64Var(&c.MinLossScale, "min-loss-scale", c.MinLossScale, "minimum dynamic fp16 loss scale: a step skipped at it, after a run of skips, stops training")
	fs.IntVar(&c.LossScaleWindow, "loss-scale-window", c.LossScaleWindow, "clean steps before the dynamic loss scale doubles")
	fs.IntVar(&c.Hysteresis, "hysteresis", c.Hysteresis, "overflows before the dynamic loss scale first halves")
	fs.BoolVar(&c.NoCheckForNaN, "no-check-for-nan-in-loss-and-grad", c.NoCheckForNaN, "keep training when the loss is NaN or infinite")

	fs.IntVar(&c.TP, "tensor-model-parallel-size", c.TP, "tensor-parallel size (TP)")
	fs.IntVar(&c.PP, "pipeline-model-parallel-size", c.PP, "pipeline-parallel size (PP)")
	c.CP.Register(fs)
	fs.IntVar(&c.LayersPerVirtualStage, "num-layers-per-virtual-pipeline-stage", c.LayersPerVirtualStage, "layers per model chunk: the interleaved 1F1B schedule (0: plain 1F1B)")
	fs.BoolVar(&c.SequenceParallel, "sequence-parallel", c.SequenceParallel, "split activations along the sequence between TP regions")
	fs.StringVar(&c.RecomputeGranularity, "recompute-granularity", c.RecomputeGranularity, "activation recomputation: full or selective (default none)")
	fs.StringVar(&c.DistributedBackend, "distributed-backend", c.DistributedBackend, "tcp (gloo is accepted as tcp) or nccl (needs --device cuda): how ranks communicate")
	fs.BoolVar(&c.DistributedOptimizer, "use-distributed-optimizer", c.DistributedOptimizer, "shard optimizer state over data-parallel ranks (ZeRO-1)")
	fs.IntVar(&c.Ranks, "ranks", c.Ranks, "ranks to run as goroutines in this process (TP × CP × PP × DP)")
	c.registerOverlap(fs)

	fs.StringVar(&c.Device, "device", c.Device, "where model, optimizer state and data live: cpu or cuda (a GPU: the one of LOCAL_RANK under megago launch; goroutine ranks share it)")

	fs.Var((*dataPath)(&c.DataPath), "data-path", "indexed dataset prefixes, each optionally preceded by a blend weight: [W1] PREFIX1 [W2 PREFIX2 ...] (default: the Go standard library's sources)")
	fs.StringVar(&c.Split, "split", c.Split, "train,valid,test proportions of the documents")
	fs.StringVar(&c.TokenizerType, "tokenizer-type", c.TokenizerType, "gosource-bpe, gpt2, GPT2BPETokenizer, NullTokenizer, ...")
	fs.StringVar(&c.VocabFile, "vocab-file", c.VocabFile, "vocabulary file of the tokenizer")
	fs.StringVar(&c.MergeFile, "merge-file", c.MergeFile, "BPE merges file of the tokenizer")

	c.registerHFTokenizer(fs)

	fs.Uint64Var(&c.Seed, "seed", c.Seed, "random seed (initialization, dropout, data order)")

	fs.IntVar(&c.EvalInterval, "eval-interval", c.EvalInterval, "iterations between validation runs (0: only at the end)")
	fs.IntVar(&c.EvalIters, "eval-iters", c.EvalIters, "global batches per validation run (0: no validation)")
	fs.IntVar(&c.LogInterval, "log-interval", c.LogInterval, "iterations per progress line")
	fs.StringVar(&c.TensorboardDir, "tensorboard-dir", c.TensorboardDir, "TensorBoard event files (default: OUT-DIR/tensorboard)")
	fs.StringVar(&c.OutDir, "out-dir", c.OutDir, "where metrics.jsonl, loss.png and the TensorBoard files go")

	c.Flags.Register(fs, evalOnly)
	c.registerMegatron(fs) // megatron_flags.go
	fs.BoolVar(&c.ExitSignalHandler, "exit-signal-handler", c.ExitSignalHandler, "on SIGTERM (or Ctrl-C), save the iteration every rank stops after (with --save); under megago launch give --grace the time of an iteration and a save")
	fs.IntVar(&c.ExitInterval, "exit-interval", c.ExitInterval, "exit after iterations that are a multiple of this, saving them with --save (0: never)")
	fs.Float64Var(&c.ExitDurationInMins, "exit-duration-in-mins", c.ExitDurationInMins, "exit after the iteration that ends this many minutes into the run, saving it with --save (0: never)")
	fs.BoolVar(&c.CheckOnly, "check-only", c.CheckOnly, "parse and check the settings, print \"settings ok\" and exit before any work")
	fs.StringVar(&c.configFile, "config", "", "JSON file of settings named like the flags (flags override it)")
}

// dataPath is --data-path: Megatron takes a list ("--data-path 0.3 A 0.7 B"); here the
// flag may be repeated, hold several space-separated words, or be followed by words
// that do not start with "-" (see listargs.Join).
type dataPath []string

func (d *dataPath) String() string { return strings.Join(*d, " ") }

func (d *dataPath) Set(s string) error {
	*d = append(*d, strings.Fields(s)...)
	return nil
}

// ErrHelp is returned for -h and --help, after the usage was printed.
var ErrHelp = flag.ErrHelp

// Parse parses args (and the --config file they name) into the flags of fs, on which
// c's flags are registered; usage is the text printed above the flags for -help. It
// fills c.Set. Every error is a usage error; for -help it prints the usage to stdout
// and returns ErrHelp.
func (c *Common) Parse(fs *flag.FlagSet, args []string, usage string, stdout io.Writer) error {
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	args = listargs.Join(args, listFlags...)
	if err := refuseRemoved(fs, args); err != nil {
		return err
	}
	if file := configFileArg(args); file != "" {
		if err := loadConfigFile(fs, file); err != nil {
			return err
		}
	}
	fs.SetOutput(io.Discard) // errors are returned, the usage printed only for -help
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return ErrHelp
		}
		return fmt.Errorf("%w (-help lists the flags)", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags start with -)", fs.Arg(0))
	}
	c.Set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { c.Set[f.Name] = true })
	return nil
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
// or lists: each element a word of a list flag (data-path), else the list as Python
// writes it, "[1,0,1,0]" (moe-layer-freq).
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
		if err := removedFlag(fs, name); err != nil {
			return fmt.Errorf("--config %s: key %q: %w", file, key, err)
		}
		f := fs.Lookup(name)
		if f == nil || name == "config" {
			return fmt.Errorf("--config %s: unknown key %q (keys are flag names, e.g. \"num-layers\")", file, key)
		}
		vals, err := jsonValues(raw)
		if err != nil {
			return fmt.Errorf("--config %s: key %q: %w", file, key, err)
		}
		if strings.HasPrefix(strings.TrimSpace(string(raw)), "[") && !slices.Contains(listFlags, name) {
			// A list for a flag of one value is its Python form: --moe-layer-freq [1,0,1,0].
			vals = []string{"[" + strings.Join(vals, ",") + "]"}
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

// StopAfterCheck reports whether the run ends after its settings were checked
// (--check-only), printing "settings ok" to w if so.
func (c *Common) StopAfterCheck(w io.Writer) bool {
	if c.CheckOnly {
		fmt.Fprintln(w, "settings ok")
	}
	return c.CheckOnly
}
