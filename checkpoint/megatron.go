package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/nlpodyssey/gopickle/types"

	"megago/nn"
	"megago/tensor"
)

// Megatron-LM legacy checkpoints: <dir>/iter_NNNNNNN/mp_rank_TT[_PPP]/model_optim_rng.pt
// (or <dir>/release/...), one torch.save file per tensor- and pipeline-parallel rank,
// each holding the rank's model state dict under "model" and Megatron's arguments under
// "args". ImportMegatron reads GPT models with Megatron-core's names and local
// (non-Transformer-Engine) layers.

// MegatronOptions says which Megatron checkpoint ImportMegatron reads and how.
type MegatronOptions struct {
	// Iteration to read; 0 means the tracker file's (which may say "release").
	Iteration int
	// Vocab is the tokenizer's vocabulary size, without Megatron's padding. 0 means the
	// arguments' vocab_size if set, else the padded size (the padding rows are then kept
	// as vocabulary entries).
	Vocab int
}

// MegatronInfo describes an imported Megatron checkpoint.
type MegatronInfo struct {
	Dir                   string // the iteration's directory
	Iteration             int
	ConsumedSamples       int
	TP, PP                int
	PaddedVocab, Vocab    int
	DType                 tensor.DType // the parameters' dtype
	DistributedOptimizer  bool         // the run used Megatron's distributed optimizer (its state is not read)
	CheckpointVersion     float64
	TransformerEngineKeys bool // the state dict used Transformer Engine's fused norm names
}

// ImportMegatron reads the Megatron-LM legacy checkpoint in dir, merges its tensor- and
// pipeline-parallel shards (column-parallel tensors along dim 0, row-parallel ones along
// dim 1, the SwiGLU fc1 per rank into gate and up, layers renumbered by stage) and
// returns the GPT's Model and its global parameters under megago's names, at TP = 1
// (vocabulary padded for megago with zero rows). Unknown tensors, architectures megago
// does not have and missing shards are errors.
func ImportMegatron(dir string, opts MegatronOptions) (Model, map[string]*tensor.Tensor, *MegatronInfo, error) {
	idir, it, err := megatronIterDir(dir, opts.Iteration)
	if err != nil {
		return Model{}, nil, nil, err
	}
	info := &MegatronInfo{Dir: idir, Iteration: it}
	first, err := readMegatronRank(idir, 0, -1)
	if err != nil {
		return Model{}, nil, nil, err
	}
	args, ok := attr(first, "args")
	if !ok {
		return Model{}, nil, nil, fmt.Errorf("checkpoint: %s: no Megatron arguments (\"args\")", idir)
	}
	a := megatronArgs{args}
	info.TP, info.PP = a.int("tensor_model_parallel_size", 1), a.int("pipeline_model_parallel_size", 1)
	info.ConsumedSamples = a.int("consumed_train_samples", 0)
	info.DistributedOptimizer = a.bool("use_distributed_optimizer")
	if v, ok := attr(first, "checkpoint_version"); ok {
		info.CheckpointVersion, _ = v.(float64)
	}
	if model, ok := attr(first, "model"); ok { // the padded vocabulary, if the arguments lack it
		if t, ok := attr(model, "embedding.word_embeddings.weight"); ok {
			if t, ok := t.(*torchTensor); ok && len(t.Shape) == 2 {
				info.PaddedVocab = t.Shape[0] * info.TP
			}
		}
	}
	cfg, err := megatronConfig(a, opts.Vocab, info)
	if err != nil {
		return Model{}, nil, nil, fmt.Errorf("checkpoint: %s: %w", idir, err)
	}
	shards, err := readMegatronShards(idir, info, first)
	if err != nil {
		return Model{}, nil, nil, err
	}
	var present int64
	for _, sh := range shards {
		for _, t := range sh.tensors {
			present += int64(t.Shape.Numel())
		}
	}
	if err := GPTModel(cfg).checkSize(present, "the tensors of its shard files"); err != nil {
		return Model{}, nil, nil, fmt.Errorf("%w (%s)", err, idir)
	}
	global, err := mergeMegatron(shards, cfg, info)
	if err != nil {
		return Model{}, nil, nil, fmt.Errorf("checkpoint: %s: %w", idir, err)
	}
	return GPTModel(cfg), global, info, nil
}

// megatronIterDir returns the directory of iteration it (0: the tracker's).
func megatronIterDir(dir string, it int) (string, int, error) {
	if it == 0 {
		b, err := os.ReadFile(filepath.Join(dir, TrackerFile))
		if err != nil {
			return "", 0, fmt.Errorf("checkpoint: %s is not a Megatron checkpoint directory: %w", dir, err)
		}
		s := strings.TrimSpace(string(b))
		if s == "release" {
			return filepath.Join(dir, "release"), 0, nil
		}
		if it, err = strconv.Atoi(s); err != nil || it < 0 {
			return "", 0, fmt.Errorf("checkpoint: %s in %s holds %q", TrackerFile, dir, s)
		}
	}
	d := filepath.Join(dir, IterDir(it))
	if _, err := os.Stat(d); err != nil {
		return "", 0, fmt.Errorf("checkpoint: %w", err)
	}
	return d, it, nil
}

// megatronRankFile returns the path of TP rank tp, PP rank pp's file (pp < 0: the
// directory naming of an unpipelined run, mp_rank_TT).
func megatronRankFile(idir string, tp, pp int) string {
	name := fmt.Sprintf("mp_rank_%02d", tp)
	if pp >= 0 {
		name += fmt.Sprintf("_%03d", pp)
	}
	return filepath.Join(idir, name, "model_optim_rng.pt")
}

var megatronRankDir = regexp.MustCompile(`^mp_rank_\d{2}(_\d{3})?$`)

// readMegatronRank reads one rank's file; pp < 0 means the mp_rank_TT naming, or
// mp_rank_TT_000 if that is absent.
func readMegatronRank(idir string, tp, pp int) (any, error) {
	path := megatronRankFile(idir, tp, pp)
	if pp < 0 {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			path = megatronRankFile(idir, tp, 0)
		}
	}
	v, err := readTorchFile(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: Megatron shard: %w", err)
	}
	return v, nil
}

// megatronArgs reads fields of Megatron's argparse.Namespace.
type megatronArgs struct{ ns any }

func (a megatronArgs) get(name string) (any, bool) {
	v, ok := attr(a.ns, name)
	return v, ok && v != nil
}

func (a megatronArgs) int(name string, def int) int {
	if v, ok := a.get(name); ok {
		if i, ok := pyInt(v); ok {
			return i
		}
	}
	return def
}

func (a megatronArgs) float(name string, def float64) float64 {
	if v, ok := a.get(name); ok {
		switch x := v.(type) {
		case float64:
			return x
		case int:
			return float64(x)
		}
	}
	return def
}

func (a megatronArgs) bool(name string) bool {
	v, _ := a.get(name)
	b, _ := v.(bool)
	return b
}

func (a megatronArgs) string(name, def string) string {
	if v, ok := a.get(name); ok {
		if s, ok := v.(string); ok {
			return s
		}
	}
	return def
}

// megatronConfig returns the GPTConfig that Megatron's arguments describe, or an error
// naming what megago's GPT lacks.
func megatronConfig(a megatronArgs, vocab int, info *MegatronInfo) (nn.GPTConfig, error) {
	var bad []string
	need := func(name string) int {
		v := a.int(name, 0)
		if v < 1 {
			bad = append(bad, name+" missing")
		}
		return v
	}
	c := nn.GPTConfig{TransformerConfig: nn.TransformerConfig{
		NumLayers: need("num_layers"), Hidden: need("hidden_size"), Heads: need("num_attention_heads"),
		FFNHidden: a.int("ffn_hidden_size", 0), HeadSize: a.int("kv_channels", 0),
		MaxPosition: a.int("max_position_embeddings", 0), Bias: a.bool("add_bias_linear"),
		NormEps:   a.float("norm_epsilon", a.float("layernorm_epsilon", 1e-5)),
		RoPETheta: a.float("rotary_base", 10000),
	}, Untied: a.bool("untie_embeddings_and_output_weights"), VocabMultiple: a.int("make_vocab_size_divisible_by", 128)}
	if a.bool("group_query_attention") {
		c.KVHeads = a.int("num_query_groups", 0)
	}
	info.PaddedVocab = a.int("padded_vocab_size", info.PaddedVocab)
	info.Vocab = vocab
	if info.Vocab == 0 {
		info.Vocab = a.int("vocab_size", info.PaddedVocab)
	}
	if info.PaddedVocab < 1 || info.Vocab < 1 || info.Vocab > info.PaddedVocab {
		bad = append(bad, fmt.Sprintf("vocabulary %d of padded %d", info.Vocab, info.PaddedVocab))
	}
	c.Vocab = info.Vocab
	switch a.string("normalization", "LayerNorm") {
	case "LayerNorm":
		c.Norm = nn.LayerNormKind
	case "RMSNorm":
		c.Norm = nn.RMSNormKind
	default:
		bad = append(bad, "normalization "+a.string("normalization", ""))
	}
	switch {
	case a.bool("swiglu"):
		c.Activation = nn.SwiGLU
	case a.bool("squared_relu"):
		bad = append(bad, "squared_relu")
	case a.bool("openai_gelu"):
		c.Activation = nn.GeLU
	default:
		c.Activation = nn.GeLUErf // torch.nn.functional.gelu, Megatron's default
	}
	switch p := a.string("position_embedding_type", "learned_absolute"); p {
	case "learned_absolute":
		c.Position = nn.LearnedPositions
	case "rope":
		c.Position = nn.RoPE
		if a.float("rotary_percent", 1) != 1 || a.bool("rotary_interleaved") {
			bad = append(bad, "partial or interleaved rotary embeddings")
		}
	default:
		bad = append(bad, "position_embedding_type "+p)
	}
	for _, f := range []string{"apply_residual_connection_post_layernorm", "qk_layernorm", "add_qkv_bias"} {
		if a.bool(f) && !(f == "add_qkv_bias" && c.Bias) {
			bad = append(bad, f)
		}
	}
	if a.int("virtual_pipeline_model_parallel_size", 1) > 1 {
		bad = append(bad, "virtual pipeline stages")
	}
	if len(bad) > 0 {
		return c, fmt.Errorf("Megatron arguments megago's GPT cannot take: %s", strings.Join(bad, ", "))
	}
	c.TransformerConfig = c.TransformerConfig.Defaults()
	return c, c.Validate()
}

// megatronShard is one rank's model state dict.
type megatronShard struct {
	tp, pp  int
	tensors map[string]*torchTensor
}

// readMegatronShards reads every rank's state dict (first is rank (0, 0)'s file).
func readMegatronShards(idir string, info *MegatronInfo, first any) ([]megatronShard, error) {
	entries, err := os.ReadDir(idir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	n := 0
	for _, e := range entries {
		if e.IsDir() && megatronRankDir.MatchString(e.Name()) {
			n++
		}
	}
	if n != info.TP*info.PP {
		return nil, fmt.Errorf("checkpoint: %s has %d rank directories, its arguments say TP=%d × PP=%d", idir, n, info.TP, info.PP)
	}
	var out []megatronShard
	for pp := range info.PP {
		for tp := range info.TP {
			v, stage := first, pp
			if info.PP == 1 {
				stage = -1
			}
			if tp > 0 || pp > 0 {
				if v, err = readMegatronRank(idir, tp, stage); err != nil {
					return nil, err
				}
			}
			sh, err := megatronStateDict(v, megatronRankFile(idir, tp, stage))
			if err != nil {
				return nil, err
			}
			sh.tp, sh.pp = tp, pp
			out = append(out, sh)
		}
	}
	return out, nil
}

// megatronStateDict returns the tensors of a rank's "model" state dict.
func megatronStateDict(v any, path string) (megatronShard, error) {
	sh := megatronShard{tensors: map[string]*torchTensor{}}
	if _, ok := attr(v, "model0"); ok {
		return sh, fmt.Errorf("checkpoint: %s: virtual pipeline stages (model0, model1, ...) are not supported", path)
	}
	model, ok := attr(v, "model")
	if !ok {
		return sh, fmt.Errorf("checkpoint: %s has no \"model\" state dict", path)
	}
	if _, ok := attr(model, "language_model"); ok {
		return sh, fmt.Errorf("checkpoint: %s uses Megatron's legacy (pre-core) model names; convert it to Megatron-core names first", path)
	}
	add := func(k, val any) error {
		name, ok := k.(string)
		if !ok {
			return fmt.Errorf("checkpoint: %s: state dict key %v is not a string", path, k)
		}
		switch t := val.(type) {
		case *torchTensor:
			sh.tensors[name] = t
		case nil:
		default:
			if !strings.HasSuffix(name, "_extra_state") {
				return fmt.Errorf("checkpoint: %s: state dict entry %s is a %T, not a tensor", path, name, val)
			}
		}
		return nil
	}
	switch d := model.(type) {
	case *types.OrderedDict:
		for e := d.List.Front(); e != nil; e = e.Next() {
			entry := e.Value.(*types.OrderedDictEntry)
			if err := add(entry.Key, entry.Value); err != nil {
				return sh, err
			}
		}
	case *types.Dict:
		for _, e := range *d {
			if err := add(e.Key, e.Value); err != nil {
				return sh, err
			}
		}
	default:
		return sh, fmt.Errorf("checkpoint: %s: \"model\" is a %T, not a state dict", path, model)
	}
	return sh, nil
}
