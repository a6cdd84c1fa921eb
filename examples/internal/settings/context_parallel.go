package settings

import "fmt"

// NoContextParallel refuses --context-parallel-size above 1 in an example (named
// example) whose model does not run under context parallelism yet: only the GPT's
// attention splits the sequence over a CP group.
func (c *Common) NoContextParallel(example string) []string {
	if c.CP.Size <= 1 {
		return nil
	}
	return []string{fmt.Sprintf("--context-parallel-size %d: context parallelism is implemented for the GPT only; the %s example runs with --tensor-model-parallel-size, --pipeline-model-parallel-size and data parallelism", c.CP.Size, example)}
}
