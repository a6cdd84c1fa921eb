package checkpoint

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

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
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	h, err := ParseHeader(b)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	dev := tensor.NewCPU()
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

// ReadHF reads a Hugging Face model directory: config.json and model.safetensors.
func ReadHF(dir string) (config map[string]any, tensors map[string]*tensor.Tensor, err error) {
	if config, err = readHFConfig(dir); err != nil {
		return nil, nil, err
	}
	tensors, _, err = ReadSafetensors(filepath.Join(dir, hfWeightsFile))
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

// ImportHF reads the Hugging Face model in dir (GPT-2, Llama, BERT or T5) and returns its
// Model and its global parameters under megago's names (TP = 1, vocabulary padded with
// zero rows to the model's VocabMultiple, 128 by default). The sizes in config.json are
// checked against the tensors in model.safetensors's header before anything is
// allocated: a model larger than its file is refused.
func ImportHF(dir string) (Model, map[string]*tensor.Tensor, error) {
	cfg, err := readHFConfig(dir)
	if err != nil {
		return Model{}, nil, err
	}
	m, err := ModelFromHFConfig(cfg)
	if err != nil {
		return Model{}, nil, fmt.Errorf("checkpoint: %s: %w", dir, err)
	}
	weights := filepath.Join(dir, hfWeightsFile)
	present, err := safetensorsElements(weights)
	if err != nil {
		return Model{}, nil, err
	}
	if err := m.checkSize(present, "the tensors of "+weights); err != nil {
		return Model{}, nil, fmt.Errorf("%w (%s)", err, filepath.Join(dir, hfConfigFile))
	}
	hf, _, err := ReadSafetensors(weights)
	if err != nil {
		return Model{}, nil, err
	}
	conv, err := m.Converter()
	if err != nil {
		return Model{}, nil, err
	}
	global, err := conv.FromHF(hf)
	if err != nil {
		return Model{}, nil, fmt.Errorf("checkpoint: %s: %w", dir, err)
	}
	return m, global, nil
}

// ExportHF writes the global parameters of model m (megago's names; any vocabulary
// padding) as a Hugging Face model directory dir: model.safetensors (in the parameters'
// dtype) and config.json. It fails for configurations Hugging Face has no class for.
func ExportHF(dir string, m Model, global map[string]*tensor.Tensor) error {
	var present int64
	for _, t := range global {
		present += int64(t.Numel())
	}
	if err := m.checkSize(present, "the tensors given"); err != nil {
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
	if err := WriteSafetensors(filepath.Join(dir, hfWeightsFile), hf, map[string]string{"format": "pt"}); err != nil {
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

// gptHFConfig completes the config.json fields cfg of a GPT of configuration c as a
// GPT-2 or a Llama, or refuses a GPT that is neither.
func gptHFConfig(c nn.GPTConfig, cfg map[string]any) error {
	gpt2 := c.Position == nn.LearnedPositions && c.Norm == nn.LayerNormKind && c.Bias && !c.PostLN &&
		c.KVHeads == c.Heads && c.HeadSize*c.Heads == c.Hidden && (c.Activation == nn.GeLU || c.Activation == nn.GeLUErf)
	llama := c.Position == nn.RoPE && c.Norm == nn.RMSNormKind && !c.Bias && !c.PostLN && c.Activation == nn.SwiGLU
	var extra []string // Megatron variants the exported config would not describe
	for _, v := range []struct {
		on   bool
		name string
	}{{c.QKNorm, "query/key norms"}, {c.QKVBias && !c.Bias, "a QKV bias alone (Qwen2)"},
		{c.RotaryPercent != 0 && c.RotaryPercent != 1, "partial rotary embeddings"}, {c.RoPEScaling != 0, "Llama 3.1 rope scaling"}} {
		if v.on {
			extra = append(extra, v.name)
		}
	}
	if len(extra) > 0 {
		return fmt.Errorf("checkpoint: Hugging Face export of a GPT with %s is not implemented", strings.Join(extra, ", "))
	}
	switch {
	case gpt2:
		if c.Activation == nn.GeLUErf {
			cfg["activation_function"] = "gelu"
		}
	case llama:
		cfg["head_dim"] = c.HeadSize
		cfg["attention_bias"], cfg["mlp_bias"] = false, false
	default:
		return fmt.Errorf("checkpoint: this GPT has no Hugging Face equivalent (GPT-2 needs learned positions, LayerNorm, biases and GeLU; Llama RoPE, RMSNorm, SwiGLU and no biases)")
	}
	return nil
}

// hfFields reads config.json values.
type hfFields struct {
	m    map[string]any
	errs []string
}

func (f *hfFields) num(key string, def float64) float64 {
	v, ok := f.m[key]
	if !ok || v == nil {
		if math.IsNaN(def) {
			f.errs = append(f.errs, key+" missing")
		}
		return def
	}
	x, ok := v.(float64)
	if !ok {
		f.errs = append(f.errs, fmt.Sprintf("%s = %v is not a number", key, v))
	}
	return x
}

func (f *hfFields) int(key string, def int) int {
	d := float64(def)
	if def < 0 {
		d = math.NaN()
	}
	x := f.num(key, d)
	if x != math.Trunc(x) {
		f.errs = append(f.errs, fmt.Sprintf("%s = %v is not an integer", key, x))
	}
	return int(x)
}

func (f *hfFields) str(key, def string) string {
	if v, ok := f.m[key].(string); ok {
		return v
	}
	return def
}

func (f *hfFields) bool(key string, def bool) bool {
	if v, ok := f.m[key].(bool); ok {
		return v
	}
	return def
}

// required marks an integer field without a default.
const required = -1

// ModelFromHFConfig returns the Model that a Hugging Face config.json describes: GPT-2
// (model_type gpt2), Llama (llama), BERT (bert) or T5 v1.0 (t5). Settings megago does not
// implement are errors.
func ModelFromHFConfig(cfg map[string]any) (Model, error) {
	f := &hfFields{m: cfg}
	var m Model
	switch t := f.str("model_type", ""); t {
	case "gpt2":
		m = f.gpt2()
	case "llama":
		m = f.llama()
	case "bert":
		m = f.bert()
	case "t5":
		m = f.t5()
	default:
		return Model{}, fmt.Errorf("model_type %q: megago imports gpt2, llama, bert and t5", t)
	}
	if len(f.errs) > 0 {
		slices.Sort(f.errs)
		return Model{}, fmt.Errorf("config.json settings megago does not implement or lacks: %v", f.errs)
	}
	return m, nil
}

// activation reads an activation function's name.
func (f *hfFields) activation(key, def string) nn.Activation {
	switch a := f.str(key, def); a {
	case "gelu_new", "gelu_pytorch_tanh", "gelu_fast":
		return nn.GeLU
	case "gelu":
		return nn.GeLUErf
	case "relu":
		return nn.ReLU
	default:
		f.errs = append(f.errs, key+" "+a)
	}
	return 0
}

// gpt2 reads GPT2Config.
func (f *hfFields) gpt2() Model {
	return GPTModel(nn.GPTConfig{TransformerConfig: nn.TransformerConfig{NumLayers: f.int("n_layer", required),
		Hidden: f.int("n_embd", required), Heads: f.int("n_head", required), FFNHidden: f.int("n_inner", 0),
		Vocab: f.int("vocab_size", required), MaxPosition: f.int("n_positions", required),
		NormEps: f.num("layer_norm_epsilon", 1e-5), Bias: true, Activation: f.activation("activation_function", "gelu_new")},
		Untied: !f.bool("tie_word_embeddings", true)})
}

// llama reads LlamaConfig.
func (f *hfFields) llama() Model {
	heads := f.int("num_attention_heads", required)
	c := nn.LlamaConfig(f.int("num_hidden_layers", required), f.int("hidden_size", required), heads,
		f.int("num_key_value_heads", heads), f.int("intermediate_size", required), f.int("vocab_size", required))
	c.NormEps, c.RoPETheta = f.num("rms_norm_eps", 1e-6), f.num("rope_theta", 10000)
	c.HeadSize, c.MaxPosition = f.int("head_dim", 0), f.int("max_position_embeddings", 0)
	c.Untied = !f.bool("tie_word_embeddings", false)
	if a := f.str("hidden_act", "silu"); a != "silu" {
		f.errs = append(f.errs, "hidden_act "+a)
	}
	if f.bool("attention_bias", false) || f.bool("mlp_bias", false) || f.m["rope_scaling"] != nil {
		f.errs = append(f.errs, "attention or MLP biases, or rope_scaling")
	}
	return GPTModel(c)
}

// bert reads BertConfig.
func (f *hfFields) bert() Model {
	c := nn.NewBERTConfig(f.int("num_hidden_layers", required), f.int("hidden_size", required),
		f.int("num_attention_heads", required), f.int("vocab_size", required), f.int("max_position_embeddings", required))
	c.FFNHidden, c.NormEps, c.TypeVocab = f.int("intermediate_size", 0), f.num("layer_norm_eps", 1e-12), f.int("type_vocab_size", 2)
	c.Activation = f.activation("hidden_act", "gelu")
	c.Dropout, c.AttnDropout = f.num("hidden_dropout_prob", 0.1), f.num("attention_probs_dropout_prob", 0.1)
	if archs, _ := f.m["architectures"].([]any); len(archs) > 0 && archs[0] == "BertForMaskedLM" {
		c.NoBinaryHead = true
	}
	if p := f.str("position_embedding_type", "absolute"); p != "absolute" {
		f.errs = append(f.errs, "position_embedding_type "+p)
	}
	return BERTModel(c)
}

// t5 reads T5Config (T5 v1.0).
func (f *hfFields) t5() Model {
	c := nn.NewT5Config(f.int("num_layers", required), f.int("d_model", required), f.int("num_heads", required),
		f.int("d_kv", required), f.int("d_ff", required), f.int("vocab_size", required))
	c.DecoderLayers = f.int("num_decoder_layers", 0)
	c.RelativeBuckets, c.RelativeMaxDistance = f.int("relative_attention_num_buckets", 32), f.int("relative_attention_max_distance", 128)
	c.NormEps, c.Dropout = f.num("layer_norm_epsilon", 1e-6), f.num("dropout_rate", 0.1)
	c.AttnDropout = c.Dropout
	if p := f.str("feed_forward_proj", "relu"); p != "relu" || !f.bool("tie_word_embeddings", true) {
		f.errs = append(f.errs, "feed_forward_proj "+p+" or untied embeddings (T5 v1.1)")
	}
	return T5Model(c)
}
