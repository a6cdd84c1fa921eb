package main

import (
	"flag"
	"io"

	"megago/examples/internal/settings"
	"megago/internal/modelflags"
	"megago/nn"
)

// config holds every setting of a run, named after Megatron's flags: the settings every
// example shares (package settings: model sizes, batches, optimizer, parallelism, data,
// logging, checkpoints) and the GPT's own. Flags override the JSON file given by
// --config, which overrides the defaults.
type config struct {
	settings.Common
	UntieEmbeddings bool
	// Arch holds Megatron's architecture flags (--normalization, --swiglu,
	// --position-embedding-type, --group-query-attention, ...): a Llama-style GPT.
	Arch modelflags.Arch
	// MoE holds Megatron's mixture-of-experts flags (--num-experts, --moe-router-topk,
	// --moe-layer-freq, --expert-model-parallel-size, ...): experts in place of the MLP.
	MoE modelflags.MoE
	// UseCheckpointArgs takes the model flags from --load's checkpoint
	// (checkpoint_args.go).
	UseCheckpointArgs bool
	// Docs are --eod-mask-loss, --reset-position-ids, --reset-attention-mask
	// (documents.go).
	Docs docFlags

	// Text generation at the end.
	Prompt      string
	GenTokens   int
	Temperature float64
	TopK        int
}

// newFlagSet registers every flag on c, with the example's defaults.
func newFlagSet(c *config) *flag.FlagSet {
	fs := flag.NewFlagSet("gpt", flag.ContinueOnError)
	c.Common = settings.Defaults()
	c.OutDir = "gpt.out"
	c.Register(fs, "its validation loss and perplexity")
	fs.BoolVar(&c.UntieEmbeddings, "untie-embeddings-and-output-weights", false, "give the output layer its own weight")
	c.Arch = modelflags.Defaults()
	c.Arch.Register(fs)
	c.MoE = modelflags.MoEDefaults()
	c.MoE.Register(fs)
	c.Docs.register(fs)
	fs.BoolVar(&c.UseCheckpointArgs, "use-checkpoint-args", false, "take the model's settings (sizes, architecture flags) from --load's checkpoint")
	fs.StringVar(&c.Prompt, "prompt", "func (b *Buffer) ", "text to continue after training")
	fs.IntVar(&c.GenTokens, "gen-tokens", 100, "tokens to generate after training (0: none)")
	fs.Float64Var(&c.Temperature, "temperature", 0.7, "sampling temperature (0: greedy)")
	fs.IntVar(&c.TopK, "top-k", 40, "sample from the k most likely tokens (0: all)")
	return fs
}

const usage = `Usage: go run ./examples/gpt [flags]

Trains a GPT on the Go standard library's sources (or --data-path) and generates
text from --prompt. Run it on N in-process ranks with --ranks N, or on N processes
with megago launch -n N -- gpt [flags]. Flags:

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
	if c.UseCheckpointArgs {
		if err := c.useCheckpointArgs(fs); err != nil {
			return nil, err
		}
	}
	if c.Arch.SwiGLU && c.FFNHiddenSize == 0 {
		c.FFNHiddenSize = modelflags.SwiGLUFFN(c.HiddenSize) // as Megatron sizes it
	}
	errs := c.Arch.Check(c.NumAttentionHeads, c.TP)
	errs = append(errs, c.MoE.Check(c.NumLayers, c.denseFFN())...)
	if len(errs) > 0 {
		return nil, settings.Error(errs)
	}
	errs = c.Check(tcpWorld, func() nn.TransformerConfig { return c.modelConfig(0).TransformerConfig })
	if len(errs) == 0 {
		errs = c.MoE.CheckLayout(c.World, c.TP, c.PP, c.denseFFN())
	}
	errs = append(errs, c.Docs.checkCP(c.CP.Size)...)
	errs = append(errs, settings.NonNegative(map[string]int{"--gen-tokens": c.GenTokens, "--top-k": c.TopK})...)
	errs = append(errs, settings.NonNegativeNumbers(map[string]float64{"--temperature": c.Temperature})...)
	if err := settings.Error(errs); err != nil {
		return nil, err
	}
	return c, nil
}
