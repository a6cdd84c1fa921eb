package settings

import (
	"flag"
	"fmt"
	"strings"
)

// The flags Megatron-LM removed: a script that still gives one is refused before any
// work, on the command line and as a --config key, with the flag that replaced it, as
// Megatron's validate_args refuses them ("--warmup argument is no longer valid, use
// --lr-warmup-fraction instead").

// removedFlags maps each removed flag to what replaces it.
var removedFlags = map[string]string{
	"warmup":                 "--lr-warmup-fraction (or --lr-warmup-iters, --lr-warmup-samples)",
	"batch-size":             "--micro-batch-size (and --global-batch-size for the whole batch)",
	"model-parallel-size":    "--tensor-model-parallel-size",
	"checkpoint-activations": "--recompute-activations, or --recompute-granularity with --recompute-method",
	"no-position-embedding":  "--position-embedding-type",
}

// removedFlag returns the error for name (a flag name without dashes) if Megatron
// removed it and fs does not define it (an example may use such a name for a flag of
// its own).
func removedFlag(fs *flag.FlagSet, name string) error {
	use, ok := removedFlags[name]
	if !ok || fs.Lookup(name) != nil {
		return nil
	}
	return fmt.Errorf("--%s is no longer valid in Megatron-LM, nor here: use %s", name, use)
}

// refuseRemoved returns the error of the first removed flag among args (up to "--").
func refuseRemoved(fs *flag.FlagSet, args []string) error {
	for _, a := range args {
		if a == "--" {
			return nil
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if err := removedFlag(fs, name); err != nil {
			return err
		}
	}
	return nil
}
