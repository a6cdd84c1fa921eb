package checkpoint_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"megago/checkpoint"
)

// A Megatron-LM checkpoint (Transformer Engine's names, TP=2 × PP=2) imported and
// exported again at TP=1 × PP=2 under local layers' names.
func ExampleExportMegatron() {
	m, global, info, err := checkpoint.ImportMegatron("testdata/megatron/gpt2_te_tp2_pp2", checkpoint.MegatronOptions{Vocab: 50})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("imported iteration %d at TP=%d PP=%d, Transformer Engine names: %v\n", info.Iteration, info.TP, info.PP, info.TransformerEngineKeys)
	dir, err := os.MkdirTemp("", "megatron")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	notes, err := checkpoint.ExportMegatron(dir, m, global, checkpoint.MegatronExportOptions{TP: 1, PP: 2, Iteration: info.Iteration, Local: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			fmt.Println(filepath.ToSlash(rel))
		}
		return err
	})
	for _, n := range notes {
		fmt.Println("note:", n)
	}
	// Output:
	// imported iteration 7 at TP=2 PP=2, Transformer Engine names: true
	// iter_0000007/mp_rank_00_000/model_optim_rng.pt
	// iter_0000007/mp_rank_00_001/model_optim_rng.pt
	// latest_checkpointed_iteration.txt
	// note: load with --ckpt-format torch (and --use-checkpoint-args to take the model's settings from the checkpoint)
	// note: written with local layers' names: load with --transformer-impl local
	// note: the checkpoint holds no optimizer or RNG state: load with --finetune, or --no-load-optim --no-load-rng
	// note: the MLP's GeLU is the tanh form, which Megatron-core computes in its bias-GeLU fusion: do not pass --no-bias-gelu-fusion
}
