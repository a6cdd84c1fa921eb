package golden_test

import (
	"fmt"

	"megago/internal/golden"
)

// Load a golden file and read its config, shapes and tied-weight aliases.
func Example() {
	f, err := golden.Load("../../nn/testdata/golden/gpt2.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(f.Model, f.ConfigString("hf_class"), "layers:", f.ConfigInt("n_layer"))
	fmt.Println("logits", f.Logits.Shape, "params", len(f.ParamNames))
	fmt.Println("lm_head.weight is", f.Aliases["lm_head.weight"])
	fmt.Println(f.Param("lm_head.weight").Shape)
	// Output:
	// gpt2 GPT2LMHeadModel layers: 2
	// logits [2 5 67] params 28
	// lm_head.weight is transformer.wte.weight
	// [67 24]
}
