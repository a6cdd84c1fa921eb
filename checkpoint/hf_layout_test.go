package checkpoint

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"megago/tensor"
)

// shardedExport writes the round trip's Llama as safetensors shards of at most 8 KiB
// into a new directory and returns it with its shard names.
func shardedExport(t *testing.T) (string, []string) {
	t.Helper()
	m, global := exportGPT(t, roundTripGPTs()["llama"], 20261201)
	dir := t.TempDir()
	must(t, ExportHFWith(dir, m, global, HFExportOptions{MaxShardSize: 8 << 10}))
	w, err := findHFWeights(dir)
	must(t, err)
	if len(w.files) < 3 || w.index != hfWeightsFile+hfIndexSuffix {
		t.Fatalf("the export has %d shards and index %q", len(w.files), w.index)
	}
	return dir, w.files
}

// edit replaces the first occurrence of old by new in file path.
func edit(t *testing.T, path, old, new string) {
	t.Helper()
	b := readFile(t, path)
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%s has no %q", path, old)
	}
	must(t, os.WriteFile(path, bytes.Replace(b, []byte(old), []byte(new), 1), 0o644))
}

// Damaged sharded layouts (safetensors and pytorch_model.bin) are refused with an error
// naming the file and what is wrong, before allocating more than the files hold.
func TestHFLayoutRejects(t *testing.T) {
	src, shards := shardedExport(t)
	binSrc := filepath.Join("testdata", "export", "llama", "bin")
	qwenBin := filepath.Join("testdata", "export", "qwen2", "bin")
	index := hfWeightsFile + hfIndexSuffix
	binIndex := hfTorchFile + hfIndexSuffix
	binShard := "pytorch_model-00002-of-00002.bin"
	for _, tc := range []struct {
		name, src string
		damage    func(t *testing.T, dir string)
		want      string // the error, with %[1]s for the directory
	}{
		{"a shard outside the directory", src, func(t *testing.T, dir string) {
			edit(t, filepath.Join(dir, index), `"`+shards[0]+`"`, `"../`+shards[0]+`"`)
		}, `checkpoint: %[1]s/model.safetensors.index.json: weight_map: "lm_head.weight" is in "../` + shards[0] + `", not a file name inside the directory`},
		{"a tensor listed twice", src, func(t *testing.T, dir string) {
			edit(t, filepath.Join(dir, index), `"model.norm.weight":`, `"model.norm.weight": "`+shards[0]+`", "model.norm.weight":`)
		}, `checkpoint: %[1]s/model.safetensors.index.json: weight_map lists "model.norm.weight" twice`},
		{"a tensor the index does not list", src, func(t *testing.T, dir string) {
			edit(t, filepath.Join(dir, index), `"model.norm.weight"`, `"model.normx.weight"`)
		}, `checkpoint: %[1]s/` + shards[len(shards)-1] + ` holds tensor "model.norm.weight", which model.safetensors.index.json does not list in it`},
		{"a tensor listed in another shard", src, func(t *testing.T, dir string) {
			edit(t, filepath.Join(dir, index), `"model.norm.weight": "`+shards[len(shards)-1]+`"`, `"model.norm.weight": "`+shards[0]+`"`)
		}, `checkpoint: %[1]s/` + shards[len(shards)-1] + ` holds tensor "model.norm.weight", which model.safetensors.index.json does not list in it`},
		{"a shard the index lists no longer", src, func(t *testing.T, dir string) {
			edit(t, filepath.Join(dir, index), `"lm_head.weight": "`+shards[0]+`"`, `"lm_head.weight": "`+shards[1]+`"`)
		}, `checkpoint: %[1]s/model.safetensors.index.json lists tensor "lm_head.weight" in ` + shards[1] + `, which does not hold it`},
		{"a missing shard", src, func(t *testing.T, dir string) {
			must(t, os.Remove(filepath.Join(dir, shards[1])))
		}, `checkpoint: open %[1]s/` + shards[1] + `: no such file or directory`},
		{"a truncated shard", src, func(t *testing.T, dir string) {
			must(t, os.Truncate(filepath.Join(dir, shards[1]), 100))
		}, `checkpoint: %[1]s/` + shards[1] + `: safetensors: header length 216 does not fit a file of 100 bytes`},
		{"an index too large", src, func(t *testing.T, dir string) {
			must(t, os.Truncate(filepath.Join(dir, index), maxHFIndex+1)) // sparse
		}, fmt.Sprintf(`checkpoint: %%[1]s/model.safetensors.index.json: an index of %d bytes is larger than %d`, maxHFIndex+1, maxHFIndex)},
		{"an empty weight map", src, func(t *testing.T, dir string) {
			must(t, os.WriteFile(filepath.Join(dir, index), []byte(`{"metadata": {}, "weight_map": {}}`), 0o644))
		}, `checkpoint: %[1]s/model.safetensors.index.json: weight_map is empty`},
		{"a .bin tensor listed in no file", binSrc, func(t *testing.T, dir string) {
			edit(t, filepath.Join(dir, binIndex), `"lm_head.weight": "`+binShard+`"`, `"lm_head.weight": "`+binShard+`", "lm_head.bias": "`+binShard+`"`)
		}, `checkpoint: %[1]s/pytorch_model.bin.index.json lists tensor "lm_head.bias" in ` + binShard + `, which does not hold it`},
		{"a truncated .bin shard", binSrc, func(t *testing.T, dir string) {
			must(t, os.Truncate(filepath.Join(dir, binShard), 20000))
		}, `checkpoint: %[1]s/` + binShard + `: not a PyTorch zip archive`},
		{"a tied lm_head.weight unlike the embedding", qwenBin, func(t *testing.T, dir string) {
			// model.safetensors, read before pytorch_model.bin, with an lm_head.weight of zeros.
			w, _, err := ReadSafetensors(filepath.Join("testdata", "export", "qwen2", hfWeightsFile))
			must(t, err)
			w["lm_head.weight"] = tensor.Zeros(tensor.NewCPU(), tensor.F32, w["model.embed_tokens.weight"].Shape()...)
			must(t, WriteSafetensors(filepath.Join(dir, hfWeightsFile), w, nil))
		}, `checkpoint: %[1]s/model.safetensors: lm_head.weight differs from model.embed_tokens.weight, but tie_word_embeddings is true`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			copyDir(t, tc.src, dir)
			tc.damage(t, dir)
			got := ""
			n := allocated(func() {
				if _, _, err := ImportHF(dir); err != nil {
					got = err.Error()
				}
			})
			if want := fmt.Sprintf(tc.want, dir); !strings.HasPrefix(got, want) {
				t.Errorf("got  %s\nwant %s", got, want)
			}
			if n > refusalBudget {
				t.Errorf("refusing allocated %d MB, more than %d MB", n>>20, refusalBudget>>20)
			}
		})
	}
}

// Sizes in config.json that the tensors of a sharded layout cannot back are refused: for
// safetensors shards from their headers, before reading a tensor; for pytorch_model.bin
// files after reading them at the sizes their records have.
func TestImportHFShardsRefuseUntrustedSizes(t *testing.T) {
	src, shards := shardedExport(t)
	for _, tc := range []struct{ src, what string }{
		{src, fmt.Sprintf("model.safetensors.index.json's %d shards", len(shards))},
		{filepath.Join("testdata", "export", "llama", "bin"), "pytorch_model.bin.index.json's 2 shards"},
	} {
		dir := t.TempDir()
		copyDir(t, tc.src, dir)
		edit(t, filepath.Join(dir, hfConfigFile), `"vocab_size": 73`, `"vocab_size": 1000000000000`)
		var err error
		n := allocated(func() { _, _, err = ImportHF(dir) })
		if want := "but the tensors of " + filepath.Join(dir, tc.what) + " have only"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", tc.what, err, want)
		}
		if n > refusalBudget {
			t.Errorf("%s: refusing allocated %d MB, more than %d MB", tc.what, n>>20, refusalBudget>>20)
		}
	}
}

// FuzzHFIndex feeds arbitrary bytes to the index parser: it must return an error or a
// non-empty weight map of named tensors in files inside the directory, never panic.
func FuzzHFIndex(f *testing.F) {
	b, err := os.ReadFile(filepath.Join("testdata", "export", "llama", "bin", hfTorchFile+hfIndexSuffix))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"weight_map": {"a": "b.safetensors", "a": "c.safetensors"}}`))
	f.Add([]byte(`{"weight_map": {"a": "../b"}}`))
	f.Add([]byte(`{"weight_map": {"a": 1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		owner, err := parseHFIndex(b)
		if err != nil {
			return
		}
		if len(owner) == 0 {
			t.Fatal("an empty weight map was accepted")
		}
		for name, file := range owner {
			if name == "" || !filepath.IsLocal(file) || filepath.Base(file) != file {
				t.Fatalf("accepted %q in %q", name, file)
			}
		}
	})
}

// FuzzHFTorchStateDict feeds arbitrary bytes to the pytorch_model.bin reader (zip,
// pickle, state dict): it must return an error or tensors, never panic.
func FuzzHFTorchStateDict(f *testing.F) {
	for _, p := range []string{filepath.Join("llama", "bin", "pytorch_model-00001-of-00002.bin"), filepath.Join("qwen2", "bin", hfTorchFile)} {
		b, err := os.ReadFile(filepath.Join("testdata", "export", p))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := readTorchZip(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		_, _ = stateDictTensors(tensor.NewCPU(), v, "fuzz.bin")
	})
}

// An export into a directory replaces the weight files of an earlier one, single or
// sharded, so that ImportHF reads what was written last.
func TestExportHFReplacesWeights(t *testing.T) {
	m, global := exportGPT(t, roundTripGPTs()["qwen2"], 1)
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o644))
	for _, shard := range []int64{0, 8 << 10, 16 << 10, 0} {
		must(t, ExportHFWith(dir, m, global, HFExportOptions{MaxShardSize: shard}))
		w, err := findHFWeights(dir)
		must(t, err)
		entries, err := os.ReadDir(dir)
		must(t, err)
		if want := len(w.files) + 2 + min(len(w.files)-1, 1); len(entries) != want { // config.json, notes.txt, the index
			t.Errorf("max shard size %d: %d files in the directory, want %d", shard, len(entries), want)
		}
		if (shard == 0) != (w.index == "") {
			t.Errorf("max shard size %d: read %v", shard, w.files)
		}
	}
}
