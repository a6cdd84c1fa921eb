package checkpoint

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// updateExportEnv, set to 1, makes TestExportHFMatchesPyTorch rewrite testdata/export
// from its model; gen_export.py then rewrites the reference logits.
const updateExportEnv = "MEGAGO_UPDATE_EXPORT"

// exportBERT returns a seeded tiny megago BERT (BertForPreTraining's shapes of
// testdata/hf/bert, vocabulary 71 padded to 128) and its global parameters
// (seededParams).
func exportBERT(t *testing.T) (Model, map[string]*tensor.Tensor) {
	t.Helper()
	cfg := nn.NewBERTConfig(2, 24, 4, 71, 16)
	cfg.FFNHidden = 96
	m, err := nn.NewBERT(&nn.Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(1), TP: parallel.Self()}, cfg, nn.Stage{})
	if err != nil {
		t.Fatal(err)
	}
	global := seededParams(m.Params(), 20261130)
	return BERTModel(m.Config), global
}

// A BERT made by megago, exported to Hugging Face's BertForPreTraining format, gives the
// logits of the reference BERT written by hand to Hugging Face's semantics (the
// bert_forward of nn/testdata/golden/gen.py) that testdata/gen_export.py ran on the
// exported files: the export is pinned byte for byte by testdata/export/bert, and the
// PyTorch logits of those bytes, testdata/export/bert/reference.safetensors, match the
// megago model's own at TP = 1 and TP = 2. TestHuggingFace checks the other direction.
// After a change to the export or to megago's generator, regenerate with
//
//	MEGAGO_UPDATE_EXPORT=1 go test ./checkpoint -run TestExportHFMatchesPyTorch
//	/usr/bin/python3 checkpoint/testdata/gen_export.py
func TestExportHFMatchesPyTorch(t *testing.T) {
	update := os.Getenv(updateExportEnv) == "1"
	m, global := exportBERT(t)
	out := t.TempDir()
	if err := ExportHF(out, m, global); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("testdata", "export", "bert")
	for _, name := range []string{hfWeightsFile, hfConfigFile} {
		got := readFile(t, filepath.Join(out, name))
		if update {
			must(t, os.MkdirAll(dir, 0o755))
			must(t, os.WriteFile(filepath.Join(dir, name), got, 0o644))
			continue
		}
		if want := readFile(t, filepath.Join(dir, name)); !bytes.Equal(got, want) {
			t.Errorf("the exported %s differs from %s (%d and %d bytes)", name, filepath.Join(dir, name), len(got), len(want))
		}
	}
	if update {
		t.Skip("rewrote testdata/export/bert; now run testdata/gen_export.py")
	}
	ref := reference(t, dir)
	if got, want := ref["logits"].Shape(), (tensor.Shape{2, 7, 71}); !got.Equal(want) {
		t.Fatalf("reference logits %v, want %v", got, want)
	}
	for _, tp := range []int{1, 2} {
		logits, binary := modelLogits(t, m, global, ref, tp)
		requireClose(t, "logits", logits, ref["logits"])
		requireClose(t, "seq_relationship", binary, ref["seq_relationship"])
	}
}
