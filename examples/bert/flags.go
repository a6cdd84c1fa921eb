package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"megago/examples/internal/corpus"
	"megago/examples/internal/settings"
	"megago/nn"
)

// config holds every setting of a run, named after Megatron's flags: the settings every
// example shares (package settings: model sizes, batches, optimizer, parallelism, data,
// logging, checkpoints) and BERT's own. Flags override the JSON file given by --config,
// which overrides the defaults.
type config struct {
	settings.Common
	MaskProb, ShortSeqProb float64
	MaskingMaxNgram        int
	NoBinaryHead           bool
	PostLN                 bool

	// The masked line filled in at the end.
	FillText string
	FillLine int

	// Fine-tuning for classification (classify.go).
	FinetuneClassify bool
	ClassifyPackages string
}

// newFlagSet registers every flag on c, with the example's defaults. Those that differ
// from package settings' and from Megatron's make a BERT that learns both tasks in a few
// minutes on two cores: samples of 256 tokens, which hold a whole declaration more often
// than not, so that its order shows (sentence order prediction stays at chance for a
// thousand iterations with 64 or 128); 40% of the tokens masked, one at a time (the MLM
// loss learns from more tokens per sample, as Wettig et al. found in "Should You Mask 15%
// in Masked Language Modeling?", and a byte-level BPE of Go has no words whose pieces
// Megatron's n-gram masking would keep together); small batches of 4, for more steps in
// the same time.
func newFlagSet(c *config) *flag.FlagSet {
	fs := flag.NewFlagSet("bert", flag.ContinueOnError)
	c.Common = settings.Defaults()
	c.OutDir = "bert.out"
	c.TrainIters = 1600
	c.MicroBatchSize = 4
	c.SeqLength = 256
	c.LR = 1e-3
	c.AdamBeta2 = 0.98
	c.WeightDecay = 0.01
	c.EvalInterval = 400
	c.EvalIters = 50
	c.Register(fs, "its validation losses and accuracies")
	fs.Float64Var(&c.MaskProb, "mask-prob", 0.4, "fraction of the tokens masked for the MLM loss (Megatron's default is 0.15)")
	fs.Float64Var(&c.ShortSeqProb, "short-seq-prob", 0.1, "probability of a sample shorter than --seq-length")
	fs.IntVar(&c.MaskingMaxNgram, "masking-max-ngram", 1, "longest run of tokens masked together (Megatron-core's masking_max_ngram, 3 there)")
	fs.BoolVar(&c.NoBinaryHead, "bert-no-binary-head", false, "train MLM only: no sentence-order prediction head")
	fs.BoolVar(&c.PostLN, "post-ln", true, "Hugging Face's post-LN BERT (false: Megatron's pre-LN, which Hugging Face has no class for)")
	fs.StringVar(&c.FillText, "fill-text", defaultFillText, "Go source one line of which is masked and filled in after training (\"\": none)")
	fs.IntVar(&c.FillLine, "fill-line", 2, "the line of --fill-text to mask, counting non-blank lines from 0")
	fs.BoolVar(&c.FinetuneClassify, "finetune-classify", false,
		"fine-tune the BERT of --load to classify snippets of code by package, instead of pretraining (see -help)")
	fs.StringVar(&c.ClassifyPackages, "classify-packages", "crypto,math,net,runtime",
		"the classes of --finetune-classify: top-level standard-library directories")
	return fs
}

// defaultFillText is the snippet --fill-line masks a line of.
const defaultFillText = `// Len returns the number of bytes of the unread portion of the buffer.
func (b *Buffer) Len() int {
	return len(b.buf) - b.off
}
`

const usage = `Usage: go run ./examples/bert [flags]

Pretrains a BERT (masked language modelling and sentence order prediction) on the Go
standard library's sources (or --data-path, one sequence per sentence) and fills in a
masked line of --fill-text. Run it on N in-process ranks with --ranks N, or on N
processes with megago launch -n N -- bert [flags].

With --finetune-classify --load DIR it fine-tunes the BERT saved in DIR (by --save) to
tell which of --classify-packages a snippet of Go comes from, and reports its
validation accuracy beside the majority class's share. The model's sizes are the
checkpoint's; unless given, --train-iters is 300, --lr 5e-4, --global-batch-size 16,
--seq-length 128, --eval-interval 100, --eval-iters 20, --hidden-dropout 0.1 and --split
80,20,0 (of the files of the packages) there. Flags:

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
	if c.FinetuneClassify {
		c.classifyDefaults()
	}
	if errs := c.NoContextParallel("bert"); len(errs) > 0 { // before the shared checks of the CP layout
		return nil, settings.Error(errs)
	}
	errs := c.Check(tcpWorld, func() nn.TransformerConfig { return c.modelConfig(0).TransformerConfig })
	errs = append(errs, c.NoMockData("bert")...)
	if !(c.MaskProb > 0 && c.MaskProb <= 1) {
		errs = append(errs, fmt.Sprintf("--mask-prob %g is outside (0, 1]", c.MaskProb))
	}
	if !(c.ShortSeqProb >= 0 && c.ShortSeqProb <= 1) {
		errs = append(errs, fmt.Sprintf("--short-seq-prob %g is outside [0, 1]", c.ShortSeqProb))
	}
	if c.MaskingMaxNgram < 1 {
		errs = append(errs, fmt.Sprintf("--masking-max-ngram must be at least 1, got %d", c.MaskingMaxNgram))
	}
	if c.SeqLength < 5 {
		errs = append(errs, fmt.Sprintf("--seq-length %d leaves no room for [CLS] A [SEP] B [SEP]", c.SeqLength))
	}
	if n := len(corpus.Lines(c.FillText)); c.FillText != "" && (n < 2 || c.FillLine < 0 || c.FillLine >= n) {
		errs = append(errs, fmt.Sprintf("--fill-line %d: --fill-text has %d non-blank lines (counting from 0), want at least 2", c.FillLine, n))
	}
	if c.FinetuneClassify {
		errs = append(errs, c.checkClassify()...)
	}
	if err := settings.Error(errs); err != nil {
		return nil, err
	}
	return c, nil
}

// classifyDefaults sets the fine-tuning defaults of the flags not given.
func (c *config) classifyDefaults() {
	for name, set := range map[string]func(){
		"train-iters":       func() { c.TrainIters = 300 },
		"lr":                func() { c.LR = 5e-4 },
		"global-batch-size": func() { c.GlobalBatchSize = 16 },
		"eval-interval":     func() { c.EvalInterval = 100 },
		"eval-iters":        func() { c.EvalIters = 20 },
		"hidden-dropout":    func() { c.HiddenDropout = 0.1 },
		"out-dir":           func() { c.OutDir = "bert-classify.out" },
		"split":             func() { c.Split = "80,20,0" },
		"seq-length":        func() { c.SeqLength = 128 },
	} {
		if !c.Set[name] {
			set()
		}
	}
}

// checkClassify checks the settings of --finetune-classify.
func (c *config) checkClassify() []string {
	var errs []string
	switch {
	case c.Load == "":
		errs = append(errs, "--finetune-classify needs --load: the directory of a pretrained BERT (go run ./examples/bert --save DIR)")
	case c.Finetune || c.EvalOnly:
		errs = append(errs, "--finetune-classify always starts from the weights of --load; leave out --finetune and --eval-only")
	}
	if c.Save != "" {
		errs = append(errs, "--finetune-classify does not save the classifier; leave out --save")
	}
	if len(c.DataPath) > 0 {
		errs = append(errs, "--finetune-classify labels the default corpus's files by package; it takes no --data-path")
	}
	if n := len(c.packages()); n < 2 {
		errs = append(errs, fmt.Sprintf("--classify-packages %q: want at least 2 comma-separated packages", c.ClassifyPackages))
	}
	return errs
}

// packages returns the classes of --classify-packages.
func (c *config) packages() []string {
	var out []string
	for _, p := range strings.Split(c.ClassifyPackages, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// modelConfig returns the BERT the flags describe (Hugging Face's post-LN BERT), for a
// vocabulary of vocab ids.
func (c *config) modelConfig(vocab int) nn.BERTConfig {
	if vocab == 0 {
		vocab = c.MakeVocabSizeDivisibleBy * c.TP // a placeholder for the checks
	}
	m := nn.NewBERTConfig(c.NumLayers, c.HiddenSize, c.NumAttentionHeads, vocab, c.MaxPositionEmbeddings)
	m.FFNHidden, m.InitStd = c.FFNHiddenSize, c.InitMethodStd
	m.Dropout, m.AttnDropout = c.HiddenDropout, c.AttentionDropout
	m.VocabMultiple, m.NoBinaryHead, m.PostLN = c.MakeVocabSizeDivisibleBy, c.NoBinaryHead, c.PostLN
	return m
}
