package golden_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"megago/internal/golden"
)

const dir = "../../nn/testdata/golden"

// ignoreIndex is the label value that excludes a position from the loss.
const ignoreIndex = -100

// model describes what a golden file must hold, derived from its config.
type model struct {
	file    string
	hidden  string // config key of C
	labels  string // input holding the token labels
	nParams func(f *golden.File) int
	shapes  func(f *golden.File) map[string][]int // param, output or "logits" -> shape
}

var models = []model{
	{
		file: "gpt2.json", hidden: "n_embd", labels: "labels",
		nParams: func(f *golden.File) int { return 2 + 12*f.ConfigInt("n_layer") + 2 },
		shapes: func(f *golden.File) map[string][]int {
			V, P, C, F := f.ConfigInt("vocab_size"), f.ConfigInt("n_positions"), f.ConfigInt("n_embd"), f.ConfigInt("n_inner")
			ids := f.Input("input_ids").Shape
			return map[string][]int{
				"transformer.wte.weight":             {V, C},
				"transformer.wpe.weight":             {P, C},
				"transformer.h.1.attn.c_attn.weight": {C, 3 * C},
				"transformer.h.1.attn.c_attn.bias":   {3 * C},
				"transformer.h.0.attn.c_proj.weight": {C, C},
				"transformer.h.0.mlp.c_fc.weight":    {C, F},
				"transformer.h.0.mlp.c_proj.weight":  {F, C},
				"transformer.ln_f.bias":              {C},
				"logits":                             {ids[0], ids[1], V},
				"last_hidden_state":                  {ids[0], ids[1], C},
			}
		},
	},
	{
		file: "bert.json", hidden: "hidden_size", labels: "masked_lm_labels",
		nParams: func(f *golden.File) int { return 5 + 16*f.ConfigInt("num_hidden_layers") + 9 },
		shapes: func(f *golden.File) map[string][]int {
			V, C, F := f.ConfigInt("vocab_size"), f.ConfigInt("hidden_size"), f.ConfigInt("intermediate_size")
			ids := f.Input("input_ids").Shape
			return map[string][]int{
				"bert.embeddings.word_embeddings.weight":           {V, C},
				"bert.embeddings.position_embeddings.weight":       {f.ConfigInt("max_position_embeddings"), C},
				"bert.embeddings.token_type_embeddings.weight":     {f.ConfigInt("type_vocab_size"), C},
				"bert.encoder.layer.1.attention.self.query.weight": {C, C},
				"bert.encoder.layer.0.intermediate.dense.weight":   {F, C},
				"bert.encoder.layer.0.output.dense.weight":         {C, F},
				"cls.predictions.bias":                             {V},
				"cls.seq_relationship.weight":                      {2, C},
				"logits":                                           {ids[0], ids[1], V},
				"seq_relationship_logits":                          {ids[0], 2},
				"mlm_loss":                                         {},
			}
		},
	},
	{
		file: "t5.json", hidden: "d_model", labels: "labels",
		nParams: func(f *golden.File) int {
			return 1 + (8*f.ConfigInt("num_layers") + 2) + (13*f.ConfigInt("num_decoder_layers") + 2)
		},
		shapes: func(f *golden.File) map[string][]int {
			V, C, F := f.ConfigInt("vocab_size"), f.ConfigInt("d_model"), f.ConfigInt("d_ff")
			NB, inner := f.ConfigInt("relative_attention_num_buckets"), f.ConfigInt("num_heads")*f.ConfigInt("d_kv")
			enc, dec := f.Input("input_ids").Shape, f.Input("decoder_input_ids").Shape
			return map[string][]int{
				"shared.weight": {V, C},
				"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": {NB, f.ConfigInt("num_heads")},
				"decoder.block.1.layer.1.EncDecAttention.q.weight":                     {inner, C},
				"decoder.block.1.layer.1.EncDecAttention.o.weight":                     {C, inner},
				"encoder.block.1.layer.1.DenseReluDense.wi.weight":                     {F, C},
				"decoder.block.0.layer.2.DenseReluDense.wo.weight":                     {C, F},
				"decoder.final_layer_norm.weight":                                      {C},
				"logits":                                                               {dec[0], dec[1], V},
				"encoder_last_hidden_state":                                            {enc[0], enc[1], C},
			}
		},
	},
	{
		file: "llama.json", hidden: "hidden_size", labels: "labels",
		nParams: func(f *golden.File) int { return 1 + 9*f.ConfigInt("num_hidden_layers") + 2 },
		shapes: func(f *golden.File) map[string][]int {
			V, C, F, HS := f.ConfigInt("vocab_size"), f.ConfigInt("hidden_size"), f.ConfigInt("intermediate_size"), f.ConfigInt("head_dim")
			NH, KVH := f.ConfigInt("num_attention_heads"), f.ConfigInt("num_key_value_heads")
			ids := f.Input("input_ids").Shape
			return map[string][]int{
				"model.embed_tokens.weight":              {V, C},
				"model.layers.1.self_attn.q_proj.weight": {NH * HS, C},
				"model.layers.1.self_attn.k_proj.weight": {KVH * HS, C},
				"model.layers.1.self_attn.v_proj.weight": {KVH * HS, C},
				"model.layers.0.self_attn.o_proj.weight": {C, NH * HS},
				"model.layers.0.mlp.gate_proj.weight":    {F, C},
				"model.layers.0.mlp.down_proj.weight":    {C, F},
				"lm_head.weight":                         {V, C},
				"logits":                                 {ids[0], ids[1], V},
				"rope_cos":                               {ids[1], HS},
			}
		},
	},
}

func TestGoldenFilesAreConsistent(t *testing.T) {
	for _, m := range models {
		t.Run(m.file, func(t *testing.T) {
			f, err := golden.Load(filepath.Join(dir, m.file))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := len(f.ParamNames), m.nParams(f); got != want {
				t.Errorf("%d params, want %d from the config", got, want)
			}
			for name, want := range m.shapes(f) {
				if got := shapeOf(t, f, name); !slices.Equal(got, want) {
					t.Errorf("%s: shape %v, want %v", name, got, want)
				}
			}
			checkGrads(t, f)
			checkTokens(t, f, m.labels)
			if f.ConfigInt(m.hidden)%128 == 0 || f.ConfigInt("vocab_size")%128 == 0 {
				t.Errorf("C %d and V %d should not be multiples of 128, so padding matters", f.ConfigInt(m.hidden), f.ConfigInt("vocab_size"))
			}
		})
	}
}

func shapeOf(t *testing.T, f *golden.File, name string) []int {
	t.Helper()
	if name == "logits" {
		return f.Logits.Shape
	}
	if p, ok := f.Params[name]; ok {
		return p.Shape
	}
	return f.Output(name).Shape
}

// checkGrads checks that every parameter has a grad of its shape that is nonzero somewhere.
func checkGrads(t *testing.T, f *golden.File) {
	t.Helper()
	for _, name := range f.ParamNames {
		g, ok := f.Grads[name]
		if !ok {
			t.Errorf("%s: no grad", name)
			continue
		}
		if !slices.Equal(g.Shape, f.Param(name).Shape) || len(g.Data) != g.Numel() {
			t.Errorf("%s: grad shape %v with %d values, param shape %v", name, g.Shape, len(g.Data), f.Param(name).Shape)
		}
		if !slices.ContainsFunc(g.Data, func(v float32) bool { return v != 0 }) {
			t.Errorf("%s: grad is zero everywhere", name)
		}
	}
}

// checkTokens checks that ids and labels are in the vocabulary and that some labels, not
// all, are ignored.
func checkTokens(t *testing.T, f *golden.File, labelsName string) {
	t.Helper()
	V := int32(f.ConfigInt("vocab_size"))
	ids, labels := f.Input("input_ids"), f.Input(labelsName)
	for _, id := range ids.Data {
		if id < 0 || id >= V {
			t.Errorf("input id %d outside [0, %d)", id, V)
		}
	}
	ignored := 0
	for _, l := range labels.Data {
		switch {
		case l == ignoreIndex:
			ignored++
		case l < 0 || l >= V:
			t.Errorf("label %d outside [0, %d)", l, V)
		}
	}
	if ignored == 0 || ignored == len(labels.Data) {
		t.Errorf("%d of %d labels ignored, want some but not all", ignored, len(labels.Data))
	}
	if !slices.Equal(labels.Shape, f.Logits.Shape[:2]) {
		t.Errorf("labels shape %v, logits shape %v", labels.Shape, f.Logits.Shape)
	}
}

func TestT5BucketTables(t *testing.T) {
	f, err := golden.Load(filepath.Join(dir, "t5.json"))
	if err != nil {
		t.Fatal(err)
	}
	rel := f.Table("relative_positions")
	nb := int32(f.ConfigInt("relative_attention_num_buckets"))
	for _, name := range []string{"relative_position_bucket_bidirectional", "relative_position_bucket_unidirectional"} {
		b := f.Table(name)
		if !slices.Equal(b.Shape, rel.Shape) {
			t.Errorf("%s: shape %v, relative_positions shape %v", name, b.Shape, rel.Shape)
		}
		for i, v := range b.Data {
			if v < 0 || v >= nb {
				t.Errorf("%s[%d] (relative position %d) = %d, outside [0, %d)", name, i, rel.Data[i], v, nb)
			}
		}
	}
}

func TestLoadRejectsMalformedFiles(t *testing.T) {
	const valid = `{"model": "m", "config": {"n": 1}, "inputs": {"ids": {"shape": [2], "data": [1, 2]}},
		"param_names": ["w"], "params": {"w": {"shape": [3], "data": [1, 2, 3]}},
		"grads": {"w": {"shape": [3], "data": [0.5, 0, 0]}}, "aliases": {"head": "w"},
		"logits": {"shape": [1, 2], "data": [0.25, 1]}, "loss": 1.5}`
	cases := []struct {
		name, old, new, want string
	}{
		{"valid", "", "", ""},
		{"bad json", `"loss": 1.5}`, `"loss": 1.5`, "decode"},
		{"short data", `"data": [1, 2, 3]}`, `"data": [1, 2]}`, `params["w"]: 2 values for shape [3], want 3`},
		{"negative dim", `"shape": [2], "data": [1, 2]`, `"shape": [-2], "data": [1, 2]`, "negative dimension"},
		{"missing grad", `"grads": {"w"`, `"grads": {"v"`, `params["w"]: no grad`},
		{"grad shape", `"grads": {"w": {"shape": [3], "data": [0.5, 0, 0]}}`, `"grads": {"w": {"shape": [1, 3], "data": [0.5, 0, 0]}}`, "param shape [3]"},
		{"unlisted param", `"param_names": ["w"]`, `"param_names": []`, "missing from param_names"},
		{"dangling alias", `{"head": "w"}`, `{"head": "x"}`, `aliases["head"]: target "x"`},
		{"no loss", `, "loss": 1.5}`, `}`, `missing "loss"`},
		{"no logits", `"logits"`, `"logitz"`, `missing "logits"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(valid, c.old) {
				t.Fatalf("test bug: %q not in the valid file", c.old)
			}
			path := filepath.Join(t.TempDir(), "x.json")
			if err := os.WriteFile(path, []byte(strings.Replace(valid, c.old, c.new, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := golden.Load(path)
			if c.want == "" {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				if got := f.Grad("head").Data[0]; got != 0.5 {
					t.Errorf(`Grad("head") (alias of w) starts with %v, want 0.5`, got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("Load error %v, want one naming %s and containing %q", err, path, c.want)
			}
		})
	}
	if _, err := golden.Load(filepath.Join(t.TempDir(), "absent.json")); err == nil {
		t.Error("Load of a missing file succeeded")
	}
}

func TestAccessorsPanicOnMissingNames(t *testing.T) {
	f, err := golden.Load(filepath.Join(dir, "gpt2.json"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		call func()
		want string
	}{
		{"missing config key", func() { f.ConfigInt("n_layers") }, `no config key "n_layers"`},
		{"not an integer", func() { f.ConfigInt("layer_norm_epsilon") }, "not an integer"},
		{"not a string", func() { f.ConfigString("n_layer") }, "not a string"},
		{"missing param", func() { f.Param("lm_head.bias") }, `no param "lm_head.bias"`},
		{"index out of range", func() { f.Logits.At(0, 0, 1000) }, "out of range"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				msg, _ := recover().(string)
				if !strings.Contains(msg, c.want) {
					t.Errorf("panic %q, want one containing %q", msg, c.want)
				}
			}()
			c.call()
		})
	}
}
