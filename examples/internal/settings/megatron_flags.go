package settings

import (
	"flag"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"megago/internal/modelflags"
)

// Megatron-LM's training flags beyond the basic ones: sample-based training and its
// learning-rate schedule, the batch-size ramp-up, mock data, the recomputation
// shorthands, per-split data paths and the flags megago accepts for what it always
// does (--use-flash-attn).

// MegatronFlags are Megatron's training flags that Common holds beside its basic ones.
// Check derives from them, as Megatron's validate_args and update_train_iters do: the
// iterations of a sample-based run, the global batch of each iteration of a ramp-up,
// and the recomputation granularity.
type MegatronFlags struct {
	// TrainSamples trains for this many samples instead of --train-iters (Check sets
	// TrainIters from it); LRDecaySamples and LRWarmupSamples are then the schedule's
	// decay and warmup in samples.
	TrainSamples, LRDecaySamples, LRWarmupSamples int
	// RampupBatchSize is --rampup-batch-size START INCREMENT SAMPLES, as given.
	RampupBatchSize []string
	// MockData trains on generated documents instead of files (the GPT example).
	MockData bool
	// RecomputeActivations is --recompute-granularity selective.
	RecomputeActivations bool
	// RecomputeMethod (uniform or block) and RecomputeNumLayers choose the layers
	// recomputed under --recompute-granularity full.
	RecomputeMethod    string
	RecomputeNumLayers int
	// UseFlashAttn is accepted and changes nothing: attention is always fused.
	UseFlashAttn bool
	// TrainDataPath, ValidDataPath and TestDataPath are one blend per split (each a
	// --data-path list); --split is then not used.
	TrainDataPath, ValidDataPath, TestDataPath []string

	ramp rampup // derived by Check from RampupBatchSize
}

// listFlags are the flags that take Megatron's space-separated lists of words.
var listFlags = slices.Concat([]string{"data-path", "train-data-path", "valid-data-path", "test-data-path", "rampup-batch-size",
	"tokenizer-special-tokens", "tiktoken-special-tokens"}, modelflags.CPListFlags)

// registerMegatron adds the flags of MegatronFlags and --data-cache-path with its alias
// --cache-dir.
func (c *Common) registerMegatron(fs *flag.FlagSet) {
	m := &c.MegatronFlags
	fs.IntVar(&m.TrainSamples, "train-samples", m.TrainSamples, "train for this many samples instead of --train-iters (the iterations follow from the global batch and its ramp-up)")
	fs.IntVar(&m.LRDecaySamples, "lr-decay-samples", m.LRDecaySamples, "with --train-samples: samples over which the learning rate decays (0: train-samples)")
	fs.IntVar(&m.LRWarmupSamples, "lr-warmup-samples", m.LRWarmupSamples, "with --train-samples: samples of linear warmup")
	fs.Var((*dataPath)(&m.RampupBatchSize), "rampup-batch-size", "with --train-samples: START INCREMENT SAMPLES: the global batch grows from START by INCREMENT over SAMPLES samples to --global-batch-size (each size a multiple of micro-batch size × DP)")
	fs.BoolVar(&m.MockData, "mock-data", m.MockData, "train on generated documents (Megatron's MockGPTDataset) instead of --data-path")
	fs.BoolVar(&m.RecomputeActivations, "recompute-activations", m.RecomputeActivations, "recompute the attention core in backward: --recompute-granularity selective")
	fs.StringVar(&m.RecomputeMethod, "recompute-method", m.RecomputeMethod, "with --recompute-granularity full: uniform (1 layer per unit) or block (every layer of each stage)")
	fs.IntVar(&m.RecomputeNumLayers, "recompute-num-layers", m.RecomputeNumLayers, "with --recompute-method: layers per recomputed unit (uniform: 1) or recomputed per stage (block: all of them)")
	fs.BoolVar(&m.UseFlashAttn, "use-flash-attn", m.UseFlashAttn, "accepted for Megatron's scripts: attention is always fused (tiled, online softmax), with or without it")
	fs.Var((*dataPath)(&m.TrainDataPath), "train-data-path", "training split: [W1] PREFIX1 [W2 PREFIX2 ...], used whole (instead of --data-path and --split)")
	fs.Var((*dataPath)(&m.ValidDataPath), "valid-data-path", "validation split: [W1] PREFIX1 [W2 PREFIX2 ...], used whole")
	fs.Var((*dataPath)(&m.TestDataPath), "test-data-path", "test split: [W1] PREFIX1 [W2 PREFIX2 ...], used whole (accepted; the examples do not test)")
	fs.StringVar(&c.CacheDir, "data-cache-path", c.CacheDir, "where the default corpus and dataset indices are cached (default: the user cache dir/megago)")
	fs.StringVar(&c.CacheDir, "cache-dir", c.CacheDir, "alias of --data-cache-path")
}

// SampleBased reports whether the run trains by samples (--train-samples): its
// learning-rate schedule then counts samples, as Megatron's does.
func (c *Common) SampleBased() bool { return c.Set["train-samples"] }

// checkMegatron checks the flags of MegatronFlags that do not depend on the layout:
// the exclusive pairs Megatron's validate_args asserts, the data sources and the
// recomputation flags, which it turns into RecomputeGranularity.
func (c *Common) checkMegatron() []string {
	m := &c.MegatronFlags
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	errs = append(errs, NonNegative(map[string]int{"--lr-decay-samples": m.LRDecaySamples, "--lr-warmup-samples": m.LRWarmupSamples,
		"--recompute-num-layers": m.RecomputeNumLayers})...)
	exclusive := func(a, b, why string) {
		if c.Set[a] && c.Set[b] {
			bad("--%s and --%s are exclusive (%s)", a, b, why)
		}
	}
	if c.SampleBased() {
		if m.TrainSamples < 1 {
			bad("--train-samples must be at least 1, got %d", m.TrainSamples)
		}
		exclusive("train-samples", "train-iters", "train by samples or by iterations")
		exclusive("train-samples", "lr-decay-iters", "a sample-based run decays over --lr-decay-samples")
		exclusive("train-samples", "lr-warmup-iters", "a sample-based run warms up over --lr-warmup-samples")
		exclusive("lr-warmup-fraction", "lr-warmup-samples", "give one warmup")
	} else {
		for _, name := range []string{"lr-decay-samples", "lr-warmup-samples", "rampup-batch-size"} {
			if c.Set[name] {
				bad("--%s needs --train-samples (an iteration-based run counts --train-iters)", name)
			}
		}
	}
	exclusive("micro-batch-size", "batch-size", "--batch-size is an alias of --micro-batch-size")
	exclusive("data-cache-path", "cache-dir", "--cache-dir is an alias of --data-cache-path")
	errs = append(errs, c.checkDataSources()...)
	errs = append(errs, c.checkRecompute()...)
	return errs
}

// NoMockData refuses --mock-data in an example (named example) that has no mock
// dataset: Megatron's mock data is GPT's (MockGPTDataset).
func (c *Common) NoMockData(example string) []string {
	if !c.MockData {
		return nil
	}
	return []string{fmt.Sprintf("--mock-data: Megatron's mock dataset is GPT's (MockGPTDataset); the %s example trains on --data-path or its default corpus", example)}
}

// checkDataSources checks that at most one source of data is given, as Megatron does:
// --mock-data, --data-path, or the per-split paths (which need a training path).
func (c *Common) checkDataSources() []string {
	m := &c.MegatronFlags
	perSplit := len(m.TrainDataPath)+len(m.ValidDataPath)+len(m.TestDataPath) > 0
	n := 0
	for _, given := range []bool{m.MockData, len(c.DataPath) > 0, perSplit} {
		if given {
			n++
		}
	}
	var errs []string
	if n > 1 {
		errs = append(errs, "give one source of data: --mock-data, --data-path, or --train-data-path with --valid-data-path and --test-data-path")
	}
	if perSplit && len(m.TrainDataPath) == 0 {
		errs = append(errs, "--valid-data-path and --test-data-path need --train-data-path")
	}
	if len(m.TrainDataPath) > 0 && len(m.ValidDataPath) == 0 && c.EvalIters > 0 {
		errs = append(errs, "--train-data-path without --valid-data-path: give --valid-data-path, or --eval-iters 0 to train without validation")
	}
	for name, words := range map[string][]string{"--train-data-path": m.TrainDataPath, "--valid-data-path": m.ValidDataPath, "--test-data-path": m.TestDataPath} {
		if _, _, err := ParseBlend(words); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", name, err))
		}
	}
	sort.Strings(errs)
	return errs
}

// checkRecompute turns --recompute-activations into --recompute-granularity selective
// and checks --recompute-method and --recompute-num-layers against the granularity, as
// Megatron's TransformerConfig does. What nn cannot recompute (some layers only, or
// several layers as one unit) is refused by checkRecomputeLayers once the layout is
// known.
func (c *Common) checkRecompute() []string {
	m := &c.MegatronFlags
	var errs []string
	if m.RecomputeActivations {
		if c.Set["recompute-granularity"] && c.RecomputeGranularity != "selective" {
			errs = append(errs, fmt.Sprintf("--recompute-activations is --recompute-granularity selective, not %q: give one of them", c.RecomputeGranularity))
		}
		c.RecomputeGranularity = "selective"
	}
	full := c.RecomputeGranularity == "full"
	switch {
	case m.RecomputeMethod != "" && m.RecomputeMethod != "uniform" && m.RecomputeMethod != "block":
		errs = append(errs, fmt.Sprintf("--recompute-method %q: want uniform or block", m.RecomputeMethod))
	case m.RecomputeMethod != "" && !full:
		errs = append(errs, "--recompute-method needs --recompute-granularity full (selective recomputation has no method)")
	case c.Set["recompute-num-layers"] && !full:
		errs = append(errs, "--recompute-num-layers needs --recompute-granularity full with --recompute-method")
	case c.Set["recompute-num-layers"] && m.RecomputeMethod == "":
		errs = append(errs, "--recompute-num-layers needs --recompute-method uniform or block")
	}
	return errs
}

// checkRecomputeLayers maps --recompute-method and --recompute-num-layers to what nn
// recomputes under full granularity — every layer of every chunk, each on its own —
// and refuses the rest. Without a method, full recomputation is megago's uniform
// method with one layer per unit (Megatron requires the method and the count).
func (c *Common) checkRecomputeLayers() []string {
	m := &c.MegatronFlags
	if m.RecomputeMethod == "" || c.RecomputeGranularity != "full" {
		return nil
	}
	perRank := c.NumLayers / c.PP
	perChunk := perRank / c.Chunks
	n := m.RecomputeNumLayers
	switch {
	case n < 1 || n > perRank:
		return []string{fmt.Sprintf("--recompute-num-layers %d must be between 1 and the %d layers per pipeline rank", n, perRank)}
	case m.RecomputeMethod == "uniform" && n > 1:
		return []string{fmt.Sprintf("--recompute-method uniform --recompute-num-layers %d: megago recomputes each layer as its own unit; "+
			"units of several layers are not implemented: use --recompute-num-layers 1 (the same recomputation, keeping each layer's input)", n)}
	case m.RecomputeMethod == "block" && n < perChunk:
		return []string{fmt.Sprintf("--recompute-method block --recompute-num-layers %d: megago recomputes every layer or none; "+
			"recomputing %d of the %d layers of each stage is not implemented: use --recompute-num-layers %d, or --recompute-granularity selective", n, n, perChunk, perChunk)}
	}
	return nil
}

// ParseBlend parses a --data-path list (also --train-data-path, ...): prefixes only
// (weights nil), or weight-prefix pairs.
func ParseBlend(words []string) (prefixes []string, weights []float64, err error) {
	if len(words) == 0 {
		return nil, nil, nil
	}
	if _, err := strconv.ParseFloat(words[0], 64); err != nil { // prefixes only
		return words, nil, nil
	}
	if len(words)%2 != 0 {
		return nil, nil, fmt.Errorf("%q: want weight-prefix pairs", strings.Join(words, " "))
	}
	for i := 0; i < len(words); i += 2 {
		w, err := strconv.ParseFloat(words[i], 64)
		if err != nil || !(w > 0) || math.IsInf(w, 0) {
			return nil, nil, fmt.Errorf("weight %q of %s: want a positive number", words[i], words[i+1])
		}
		weights = append(weights, w)
		prefixes = append(prefixes, words[i+1])
	}
	return prefixes, weights, nil
}
