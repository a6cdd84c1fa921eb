package settings_test

import (
	"flag"
	"fmt"
	"io"

	"megago/examples/internal/settings"
	"megago/nn"
)

// An example's settings: the common flags with its own defaults, parsed and checked
// against a world of 4 goroutine ranks.
func Example() {
	c := settings.Defaults()
	c.OutDir = "bert.out"
	fs := flag.NewFlagSet("bert", flag.ContinueOnError)
	c.Register(fs, "its validation numbers")
	args := []string{"--ranks", "4", "--tensor-model-parallel-size", "2", "--global-batch-size", "16"}
	if err := c.Parse(fs, args, "Usage: bert [flags]\n", io.Discard); err != nil {
		fmt.Println(err)
		return
	}
	model := func() nn.TransformerConfig {
		return nn.TransformerConfig{NumLayers: c.NumLayers, Hidden: c.HiddenSize, Heads: c.NumAttentionHeads, Vocab: 256,
			MaxPosition: c.MaxPositionEmbeddings}
	}
	if err := settings.Error(c.Check(0, model)); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("TP %d × PP %d × DP %d, %d micro-batches of %d: %v\n", c.TP, c.PP, c.DP, c.Microbatches, c.MicroBatchSize, c.Schedule())

	c.Ranks = 3
	fmt.Println(settings.Error(c.Check(0, model)))
	// Output:
	// TP 2 × PP 1 × DP 2, 2 micro-batches of 4: no-pipelining-m2
	// 3 ranks do not divide into TP=2 × PP=1
}
