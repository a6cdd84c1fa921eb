package checkpoint

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"megago/internal/atomicfile"
	"megago/nn"
	"megago/tensor"
)

// Hugging Face format: a directory with config.json and model.safetensors, as
// save_pretrained writes them (one file; tied copies left out).

const (
	hfConfigFile  = "config.json"
	hfWeightsFile = "model.safetensors"
)

// ReadSafetensors reads every tensor of a safetensors file onto the CPU, with the
// file's metadata.
func ReadSafetensors(path string) (map[string]*tensor.Tensor, map[string]string, error) {
	return readSafetensorsOn(tensor.NewCPU(), path)
}

// readSafetensorsOn is ReadSafetensors onto the CPU device dev.
func readSafetensorsOn(dev *tensor.Device, path string) (map[string]*tensor.Tensor, map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	h, err := ParseHeader(b)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	out := map[string]*tensor.Tensor{}
	for _, t := range h.Tensors {
		out[t.Name] = fromBytes(dev, t.DType, t.Shape, b[h.DataStart+t.Begin:h.DataStart+t.End])
	}
	return out, h.Metadata, nil
}

// WriteSafetensors writes tensors (in name order) and metadata as the safetensors file
// path, through a temporary file that is fsynced and renamed.
func WriteSafetensors(path string, tensors map[string]*tensor.Tensor, metadata map[string]string) error {
	var ts []stTensor
	for _, name := range sortedKeys(tensors) {
		t := tensors[name].Detach()
		p := &outPiece{name: name, dtype: t.DType(), shape: t.Shape().Clone(), t: t}
		ts = append(ts, p.stTensor())
	}
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	if err := writeSafetensors(w, ts, metadata); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, buf.Bytes()); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// ReadHF reads a Hugging Face model directory: config.json and the tensors, as stored,
// of model.safetensors, model.safetensors.index.json and its shards, pytorch_model.bin or
// pytorch_model.bin.index.json and its shards (the first present, in that order).
func ReadHF(dir string) (config map[string]any, tensors map[string]*tensor.Tensor, err error) {
	if config, err = readHFConfig(dir); err != nil {
		return nil, nil, err
	}
	w, err := findHFWeights(dir)
	if err != nil {
		return nil, nil, err
	}
	tensors, err = w.read()
	return config, tensors, err
}

// readHFConfig reads dir's config.json.
func readHFConfig(dir string) (config map[string]any, err error) {
	b, err := os.ReadFile(filepath.Join(dir, hfConfigFile))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if err := json.Unmarshal(b, &config); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", filepath.Join(dir, hfConfigFile), err)
	}
	return config, nil
}

// safetensorsElements returns the number of elements of the tensors of a safetensors
// file, from its header alone.
func safetensorsElements(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	h, err := ReadHeader(f, st.Size())
	if err != nil {
		return 0, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	var n int64
	for _, t := range h.Tensors {
		n += int64(t.Shape.Numel())
	}
	return n, nil
}

// ImportHF reads the Hugging Face model in dir (GPT-2, Llama, Mistral, Qwen2, Qwen3,
// Mixtral, Qwen2-MoE, Qwen3-MoE, BERT or T5; any layout ReadHF reads) and returns its
// Model and its global parameters under megago's names (TP = 1, EP = 1, vocabulary
// padded with zero rows to the model's VocabMultiple, 128 by default). The sizes in config.json are checked against the tensors present
// before a model is built: for safetensors from the files' headers, before any tensor is
// read; for pytorch_model.bin after reading them (each record at a size checked against
// its archive). A model larger than its files is refused.
func ImportHF(dir string) (Model, map[string]*tensor.Tensor, error) {
	cfg, err := readHFConfig(dir)
	if err != nil {
		return Model{}, nil, err
	}
	m, err := ModelFromHFConfig(cfg)
	if err != nil {
		return Model{}, nil, fmt.Errorf("checkpoint: %s: %w", dir, err)
	}
	w, err := findHFWeights(dir)
	if err != nil {
		return Model{}, nil, err
	}
	check := func(present int64) error {
		if err := m.checkSize(present, "the tensors of "+w.describe()); err != nil {
			return fmt.Errorf("%w (%s)", err, filepath.Join(dir, hfConfigFile))
		}
		return nil
	}
	var hf map[string]*tensor.Tensor
	if !w.torch {
		present, err := w.elements()
		if err != nil {
			return Model{}, nil, err
		}
		if err := check(present); err != nil {
			return Model{}, nil, err
		}
	}
	if hf, err = w.read(); err != nil {
		return Model{}, nil, err
	}
	if w.torch {
		if err := check(elementsOf(hf)); err != nil {
			return Model{}, nil, err
		}
	}
	if hf, err = canonicalHFNames(m, (&hfFields{m: cfg}).str("model_type", ""), hf); err != nil {
		return Model{}, nil, fmt.Errorf("checkpoint: %s: %w", w.describe(), err)
	}
	conv, err := m.Converter()
	if err != nil {
		return Model{}, nil, fmt.Errorf("checkpoint: %s: %w", filepath.Join(dir, hfConfigFile), err)
	}
	global, err := conv.FromHF(hf)
	if err != nil {
		return Model{}, nil, fmt.Errorf("checkpoint: %s: %w", dir, err)
	}
	return m, global, nil
}

// ExportHF writes the global parameters of model m (megago's names; any vocabulary
// padding) as a Hugging Face model directory dir: model.safetensors (in the parameters'
// dtype) and config.json, as ExportHFWith with the zero options. It fails for
// configurations Hugging Face has no class for.
func ExportHF(dir string, m Model, global map[string]*tensor.Tensor) error {
	return ExportHFWith(dir, m, global, HFExportOptions{})
}

// ExportHFWith is ExportHF with options: with opts.MaxShardSize the tensors are split
// into shards with model.safetensors.index.json, as save_pretrained's max_shard_size.
// config.json has the keys transformers writes for the model type (see hfConfigKeys).
// Weight files an earlier export left in dir (model.safetensors, model-*-of-*.safetensors
// and their index) that this one does not write are removed, as save_pretrained does, so
// that ImportHF reads what was written.
func ExportHFWith(dir string, m Model, global map[string]*tensor.Tensor, opts HFExportOptions) error {
	if opts.MaxShardSize < 0 {
		return fmt.Errorf("checkpoint: MaxShardSize %d must be ≥ 0", opts.MaxShardSize)
	}
	if err := m.checkSize(elementsOf(global), "the tensors given"); err != nil {
		return err
	}
	cfg, err := hfConfig(m)
	if err != nil {
		return err
	}
	conv, err := m.Converter()
	if err != nil {
		return err
	}
	src := global
	if err := fitVocab(m, conv, global, &src); err != nil {
		return err
	}
	hf, err := conv.ToHF(src)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if names := sortedKeys(hf); len(names) > 0 {
		cfg["torch_dtype"] = map[tensor.DType]string{tensor.F32: "float32", tensor.BF16: "bfloat16",
			tensor.F16: "float16", tensor.F64: "float64"}[hf[names[0]].DType()]
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	js, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return fmt.Errorf("checkpoint: config.json: %w", err)
	}
	if err := writeHFShards(dir, hf, opts.MaxShardSize); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, hfConfigFile), append(js, '\n')); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// fitVocab sets *out to global with the vocabulary-padded tensors cut or padded to the
// converter's padded vocabulary (a checkpoint saved at TP = 2 pads differently from the
// TP = 1 model the converter is).
func fitVocab(m Model, conv nn.HFConverter, global map[string]*tensor.Tensor, out *map[string]*tensor.Tensor) error {
	v, _, names, err := m.vocab()
	if err != nil {
		return err
	}
	rows := map[string]int{}
	for _, p := range conv.(nn.Module).Params() {
		rows[p.Name] = p.GlobalShape[0]
	}
	fitted := map[string]*tensor.Tensor{}
	for k, t := range global {
		fitted[k] = t
	}
	for _, name := range names {
		t, ok := global[name]
		if !ok || t.Dim(0) == rows[name] {
			continue
		}
		if t.Dim(0) < v {
			return fmt.Errorf("checkpoint: %s has %d rows, fewer than the vocabulary %d", name, t.Dim(0), v)
		}
		fitted[name] = padRowsTo(t.Detach().Narrow(0, 0, v), rows[name])
	}
	*out = fitted
	return nil
}

// hfConfig returns the config.json fields of m, checking that Hugging Face has its
// architecture.
func hfConfig(m Model) (map[string]any, error) {
	a, err := m.arch()
	if err != nil {
		return nil, err
	}
	conv, err := m.Converter()
	if err != nil {
		return nil, err
	}
	cfg := conv.HFConfig()
	if err := a.hfConfig(m, cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}
