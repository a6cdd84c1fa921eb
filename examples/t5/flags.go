package main

import (
	"cmp"
	"flag"
	"fmt"
	"io"

	"megago/examples/internal/settings"
	"megago/nn"
)

// config holds every setting of a run, named after Megatron's flags: the settings every
// example shares (package settings: model sizes, batches, optimizer, parallelism, data,
// logging, checkpoints) and T5's own. --seq-length is the encoder's length, as in
// Megatron (--encoder-seq-length is its other name). Flags override the JSON file given
// by --config, which overrides the defaults.
type config struct {
	settings.Common
	DecoderSeqLength                   int
	EncoderNumLayers, DecoderNumLayers int // 0: --num-layers
	KVChannels                         int // head size; 0: hidden / heads
	EmbeddingInitStd                   float64

	// Span corruption.
	VocabExtraIDs int
	MaskProb      float64
	ShortSeqProb  float64

	// Sentinel filling at the end.
	FillSample int
	FillText   string
}

// newFlagSet registers every flag on c, with the example's defaults.
func newFlagSet(c *config) *flag.FlagSet {
	fs := flag.NewFlagSet("t5", flag.ContinueOnError)
	c.Common = settings.Defaults()
	c.NumLayers, c.SeqLength, c.MicroBatchSize, c.TrainIters, c.LR = 2, 64, 16, 800, 3e-3
	c.InitMethodStd = 0.088 // ≈ hidden^-0.5, Hugging Face's T5 scale for most weights
	c.EvalInterval = 200
	c.OutDir = "t5.out"
	c.Register(fs, "its validation loss and span-token accuracy")
	fs.IntVar(&c.SeqLength, "encoder-seq-length", c.SeqLength, "alias of --seq-length: encoder tokens per sample (Te)")
	fs.IntVar(&c.DecoderSeqLength, "decoder-seq-length", 32, "decoder tokens per sample (Td): sentinels, span tokens and EOS")
	fs.IntVar(&c.EncoderNumLayers, "encoder-num-layers", 0, "encoder layers (0: --num-layers)")
	fs.IntVar(&c.DecoderNumLayers, "decoder-num-layers", 0, "decoder layers (0: --num-layers)")
	fs.IntVar(&c.KVChannels, "kv-channels", 0, "attention head size (0: hidden size / heads)")
	fs.Float64Var(&c.EmbeddingInitStd, "embedding-init-method-std", 1, "std of the shared word embedding's initialization (Hugging Face's T5: 1; 0: --init-method-std)")
	fs.IntVar(&c.VocabExtraIDs, "vocab-extra-ids", 100, "T5 sentinels <extra_id_0>, <extra_id_1>, ... added to the vocabulary")
	fs.Float64Var(&c.MaskProb, "mask-prob", 0.3, "fraction of tokens masked into spans (Megatron's default is 0.15; more targets per sample learn faster)")
	fs.Float64Var(&c.ShortSeqProb, "short-seq-prob", 0.1, "probability that a sample is shorter than --seq-length")
	fs.IntVar(&c.FillSample, "fill-sample", 0, "validation sample whose sentinels are filled in after training (-1: none)")
	fs.StringVar(&c.FillText, "fill-text", "", "text with sentinels <extra_id_0>, <extra_id_1>, ... to fill in after training, instead of a validation sample")
	return fs
}

const usage = `Usage: go run ./examples/t5 [flags]

Pretrains a T5 by span corruption on the Go standard library's sources (or
--data-path, datasets of sentences made with megago preprocess -split-sentences),
reports span-token accuracy beside the most-frequent-token baseline, and fills the
sentinels of a validation sample with greedy decoding. T5 runs with tensor and data
parallelism (not pipeline). Run it on N in-process ranks with --ranks N, or on N
processes with megago launch -n N -- t5 [flags]. Flags:

`

// errHelp is returned for -h and --help, after the usage was printed.
var errHelp = settings.ErrHelp

// parseConfig returns the settings of args (and the --config file they name), checked
// against the world size: tcpWorld when the environment describes a TCP job, else
// --ranks. Every error is a usage error, found before any work starts.
func parseConfig(args []string, tcpWorld int, stdout io.Writer) (*config, error) {
	c := &config{}
	fs := newFlagSet(c)
	if err := c.Parse(fs, args, usage, stdout); err != nil {
		return nil, err
	}
	if c.PP > 1 { // before the shared checks, which would split the layers into stages
		return nil, fmt.Errorf("--pipeline-model-parallel-size %d: T5 runs with tensor and data parallelism only "+
			"(megago does not split its encoder and decoder into pipeline stages); use --tensor-model-parallel-size and more ranks for DP", c.PP)
	}
	if errs := c.NoContextParallel("t5"); len(errs) > 0 { // before the shared checks of the CP layout
		return nil, settings.Error(errs)
	}
	errs := c.Check(tcpWorld, func() nn.TransformerConfig { return c.modelConfig(0).TransformerConfig })
	errs = append(errs, c.NoMockData("t5")...)
	errs = append(errs, settings.NonNegative(map[string]int{"--encoder-num-layers": c.EncoderNumLayers,
		"--decoder-num-layers": c.DecoderNumLayers, "--kv-channels": c.KVChannels, "--vocab-extra-ids": c.VocabExtraIDs})...)
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if c.DecoderSeqLength < 3 {
		bad("--decoder-seq-length must be at least 3 (a sentinel, a token and EOS), got %d", c.DecoderSeqLength)
	}
	if c.VocabExtraIDs < 1 {
		bad("--vocab-extra-ids must be at least 1: span corruption needs sentinels")
	}
	if !(c.MaskProb > 0 && c.MaskProb <= 1) {
		bad("--mask-prob %g is outside (0, 1]", c.MaskProb)
	}
	if !(c.ShortSeqProb >= 0 && c.ShortSeqProb <= 1) {
		bad("--short-seq-prob %g is outside [0, 1]", c.ShortSeqProb)
	}
	errs = append(errs, settings.NonNegativeNumbers(map[string]float64{"--embedding-init-method-std": c.EmbeddingInitStd})...)
	if c.Set["fill-sample"] && c.FillSample >= 0 && c.EvalIters == 0 {
		bad("--fill-sample %d needs a validation split (--eval-iters of at least 1)", c.FillSample)
	}
	if c.SequenceParallel && (c.SeqLength%c.TP != 0 || c.DecoderSeqLength%c.TP != 0) {
		bad("--sequence-parallel: --seq-length %d and --decoder-seq-length %d must be divisible by TP %d", c.SeqLength, c.DecoderSeqLength, c.TP)
	}
	if err := settings.Error(errs); err != nil {
		return nil, err
	}
	return c, nil
}

// modelConfig returns the T5 the flags describe, for a vocabulary of vocab ids.
func (c *config) modelConfig(vocab int) nn.T5Config {
	if vocab == 0 {
		vocab = c.MakeVocabSizeDivisibleBy * c.TP // a placeholder for the checks
	}
	heads := c.NumAttentionHeads
	hs := c.KVChannels
	if hs == 0 && heads > 0 {
		hs = c.HiddenSize / heads
	}
	m := nn.NewT5Config(cmp.Or(c.EncoderNumLayers, c.NumLayers), c.HiddenSize, heads, hs,
		cmp.Or(c.FFNHiddenSize, 4*c.HiddenSize), vocab)
	m.DecoderLayers = cmp.Or(c.DecoderNumLayers, c.NumLayers)
	m.VocabMultiple = c.MakeVocabSizeDivisibleBy
	m.InitStd, m.EmbeddingInitStd = c.InitMethodStd, c.EmbeddingInitStd
	m.Dropout, m.AttnDropout = c.HiddenDropout, c.AttentionDropout
	return m
}

// flopsPerIteration returns the model FLOPs of one iteration, as BENCHMARKS.md counts
// them (3× the forward's multiply-adds ×2), with A = NH·HS: per sample, the encoder's
// Te·Le·(4C·A + 2C·F) weights and 2·Le·Te²·A attention, the decoder's
// Td·Ld·(6C·A + 2C·F) weights, Te·Ld·2C·A cross keys and values and
// 2·Ld·(Td² + Td·Te)·A attention, and the output layer's Td·Vp·C.
func (c *config) flopsPerIteration(m nn.T5Config) float64 {
	tc := m.TransformerConfig.Defaults()
	te, td := float64(c.SeqLength), float64(c.DecoderSeqLength)
	le, ld := float64(tc.NumLayers), float64(m.DecoderLayers)
	ch, f, a := float64(tc.Hidden), float64(tc.FFNHidden), float64(tc.Heads*tc.HeadSize)
	vp := float64(nn.PaddedVocab(tc.Vocab, m.VocabMultiple, c.TP))
	macs := te*le*(4*ch*a+2*ch*f) + 2*le*te*te*a +
		td*ld*(6*ch*a+2*ch*f) + te*ld*2*ch*a + 2*ld*(td*td+td*te)*a + td*vp*ch
	return float64(c.GlobalBatchSize) * 6 * macs
}
