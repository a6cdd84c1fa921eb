package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"megago/checkpoint"
)

// checkpointTestdata holds the reference checkpoints written by
// checkpoint/testdata/gen.py.
const checkpointTestdata = "../../checkpoint/testdata"

// A Llama's sharded pytorch_model.bin files (checkpoint/testdata/export/llama/bin,
// written by PyTorch from the safetensors export beside them) convert to sharded
// safetensors (-max-shard-size) and from those to one model.safetensors holding the
// export's bytes.
func TestConvertCommandHFLayouts(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(checkpointTestdata, "export", "llama")
	sharded, single := filepath.Join(dir, "sharded"), filepath.Join(dir, "single")
	for _, args := range [][]string{
		{"-from", "hf", "-to", "hf", "-max-shard-size", "8KiB", filepath.Join(src, "bin"), sharded},
		{"-from", "hf", "-to", "hf", sharded, single},
	} {
		if _, stderr, err := run(t, append([]string{"convert"}, args...)...); err != nil {
			t.Fatalf("megago convert %v: %v\n%s", args, err, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(sharded, "model.safetensors.index.json")); err != nil {
		t.Errorf("-max-shard-size wrote no index: %v", err)
	}
	sameWeights(t, src, single, "pytorch_model.bin and shards")
}

// sameWeights checks that the Hugging Face directories a and b hold the same
// model.safetensors, which went through via.
func sameWeights(t *testing.T, a, b, via string) {
	t.Helper()
	x, err := os.ReadFile(filepath.Join(a, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(filepath.Join(b, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(x, y) {
		t.Errorf("the model changed on its way through %s (%d and %d bytes)", via, len(x), len(y))
	}
}

// A Megatron checkpoint (TP=2) goes to Hugging Face, to a megago checkpoint at TP=2, is
// resharded to PP=2 and exported to Hugging Face again: both exports hold the same bytes.
func TestConvertCommandRoundTrip(t *testing.T) {
	dir := t.TempDir()
	hf1, mg2, mg3, hf2 := filepath.Join(dir, "hf1"), filepath.Join(dir, "tp2"), filepath.Join(dir, "pp2"), filepath.Join(dir, "hf2")
	for _, args := range [][]string{
		{"-from", "megatron", "-vocab-size", "50", "-to", "hf", filepath.Join(checkpointTestdata, "megatron", "gpt2_tp2"), hf1},
		{"-from", "hf", "-tp", "2", hf1, mg2},
		{"-pp", "2", mg2, mg3},
		{"-to", "hf", mg3, hf2},
	} {
		stdout, stderr, err := run(t, append([]string{"convert"}, args...)...)
		if err != nil {
			t.Fatalf("megago convert %v: %v\n%s", args, err, stderr)
		}
		if !strings.HasPrefix(stdout, "converted ") || !strings.Contains(stdout, "a gpt model") {
			t.Errorf("megago convert %v printed %q", args, stdout)
		}
	}
	sameWeights(t, hf1, hf2, "megago checkpoints")
	m, err := checkpoint.ReadManifest(filepath.Join(mg3, checkpoint.IterDir(0)))
	if err != nil {
		t.Fatal(err)
	}
	if m.Layout.TP != 1 || m.Layout.PP != 2 || m.Optimizer != nil {
		t.Errorf("resharded manifest: %+v", m)
	}

	// Megatron straight to megago keeps the iteration and the data position.
	mg := filepath.Join(dir, "from-megatron")
	if _, stderr, err := run(t, "convert", "-from", "megatron", "-vocab-size", "50", "-tp", "2",
		filepath.Join(checkpointTestdata, "megatron", "gpt2_tp2"), mg); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if m, err = checkpoint.ReadManifest(filepath.Join(mg, checkpoint.IterDir(7))); err != nil {
		t.Fatal(err)
	}
	if m.Iteration != 7 || m.ConsumedSamples != 56 || m.Layout.TP != 2 {
		t.Errorf("manifest of the imported Megatron checkpoint: %+v", m)
	}
}

// The tiny Mixtral and Qwen3-MoE (checkpoint/testdata/hfmoe) go to megago at TP=2, are
// resharded to TP=1 × PP=2 and exported to Hugging Face again: the export holds the
// original bytes (each expert's slices, written by both TP ranks, are read back whole).
func TestConvertCommandMoERoundTrip(t *testing.T) {
	for _, name := range []string{"mixtral", "qwen3_moe"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(checkpointTestdata, "hfmoe", name)
			tp2, pp2, hf := filepath.Join(dir, "tp2"), filepath.Join(dir, "pp2"), filepath.Join(dir, "hf")
			for _, args := range [][]string{{"-from", "hf", "-tp", "2", src, tp2}, {"-pp", "2", tp2, pp2}, {"-to", "hf", pp2, hf}} {
				if _, stderr, err := run(t, append([]string{"convert"}, args...)...); err != nil {
					t.Fatalf("megago convert %v: %v\n%s", args, err, stderr)
				}
			}
			sameWeights(t, src, hf, "megago checkpoints at TP=2 and PP=2")
		})
	}
}

// The Transformer Engine copy of the Megatron GPT-2 goes to a Megatron checkpoint at
// TP=1 × PP=2 with local names and on to Hugging Face: the same bytes as the plain
// checkpoint's export; the export's load notes are printed on stderr.
func TestConvertCommandToMegatron(t *testing.T) {
	dir := t.TempDir()
	src := func(name string) string { return filepath.Join(checkpointTestdata, "megatron", name) }
	plain, mgt, back := filepath.Join(dir, "plain"), filepath.Join(dir, "megatron"), filepath.Join(dir, "back")
	if _, stderr, err := run(t, "convert", "-from", "megatron", "-vocab-size", "50", "-to", "hf", src("gpt2_tp2"), plain); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	stdout, stderr, err := run(t, "convert", "-from", "megatron", "-vocab-size", "50", "-to", "megatron",
		"--target-tensor-parallel-size", "1", "--target-pipeline-parallel-size", "2", "--transformer-impl", "local",
		src("gpt2_te_tp2_pp2"), mgt)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, "to megatron") || !strings.Contains(stdout, "at TP=1 PP=2") ||
		!strings.Contains(stderr, "--ckpt-format torch") || !strings.Contains(stderr, "--transformer-impl local") {
		t.Errorf("megago convert --to megatron printed %q and %q", stdout, stderr)
	}
	if _, stderr, err := run(t, "convert", "-from", "megatron", "-to", "hf", mgt, back); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	a, err := os.ReadFile(filepath.Join(plain, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(back, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("the model changed on its way through a Megatron export (%d and %d bytes)", len(a), len(b))
	}
	info, err := os.ReadFile(filepath.Join(mgt, "latest_checkpointed_iteration.txt"))
	if err != nil || string(info) != "7" {
		t.Errorf("tracker %q (%v), want the source's iteration 7", info, err)
	}
}

func TestConvertCommandUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"a"}, "a source and a destination"},
		{[]string{"-from", "onnx", "a", "b"}, `-from "onnx"`},
		{[]string{"-to", "hf", "-tp", "2", "a", "b"}, "megago destination only"},
		{[]string{"-vocab-size", "3", "a", "b"}, "Megatron source only"},
		{[]string{"-max-shard-size", "5GB", "a", "b"}, "Hugging Face destination only"},
		{[]string{"-to", "hf", "-max-shard-size", "5XB", "a", "b"}, `"5XB" is not a positive size`},
		{[]string{"a", "a"}, "in place"},
		{[]string{"-to", "megatron", "-transformer-impl", "apex", "a", "b"}, `-transformer-impl "apex"`},
		{[]string{"-to", "hf", "-bf16", "a", "b"}, "Megatron destination only"},
		{[]string{"-to", "megatron", "-bf16", "-fp16", "a", "b"}, "exclude each other"},
	} {
		_, _, err := run(t, append([]string{"convert"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || exitCode(err) != 2 {
			t.Errorf("convert %v: %v (exit %d), want a usage error containing %q", tc.args, err, exitCode(err), tc.want)
		}
	}
	_, _, err := run(t, "convert", "-from", "hf", filepath.Join(t.TempDir(), "none"), t.TempDir())
	if err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("a missing source: %v", err)
	}
}

// convert --from hf with a config.json whose vocab_size the weights cannot back is an
// error naming both files, not a panic or a huge allocation.
func TestConvertCommandRefusesUntrustedSizes(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(checkpointTestdata, "hf", "gpt2")
	for _, name := range []string{"config.json", "model.safetensors"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "config.json" {
			b = bytes.Replace(b, []byte(`"vocab_size": 67`), []byte(`"vocab_size": 1000000000000`), 1)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err := run(t, "convert", "-from", "hf", dir, filepath.Join(t.TempDir(), "out"))
	// Lower bound of the parameters: vocabulary and positions × 24 plus 2 layers of
	// 2·24·24 (query, output) + 2·24·96 (MLP); 16488 elements in model.safetensors.
	want := "convert: checkpoint: the gpt configuration (vocabulary 1000000000000, hidden 24, 2 layers, 4 heads of 6, MLP 96) needs at least 2.4e+13 parameters, but the tensors of " +
		filepath.Join(dir, "model.safetensors") + " have only 16488 elements: its sizes do not match them (" + filepath.Join(dir, "config.json") + ")"
	if err == nil || err.Error() != want {
		t.Fatalf("megago convert: %v\nwant %s", err, want)
	}
}
