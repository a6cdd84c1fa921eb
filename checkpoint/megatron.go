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

	"megago/tensor"
)

// Megatron-LM legacy checkpoints: <dir>/iter_NNNNNNN/mp_rank_TT[_PPP]/model_optim_rng.pt
// (or <dir>/release/...), one torch.save file per tensor- and pipeline-parallel rank,
// each holding the rank's model state dict under "model" and Megatron's arguments under
// "args". ImportMegatron reads GPT models with Megatron-core's names, local or Transformer
// Engine layers, and the legacy (pre-core) model's names (megatron_legacy.go).

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
	Legacy                bool // the state dict held the legacy (pre-core) model
	// Warnings are what the import noticed and kept going: replicated tensors
	// (norms, row-parallel biases) that differ between TP ranks, of which rank 0's copy
	// was taken.
	Warnings []string
}

// ImportMegatron reads the Megatron-LM legacy checkpoint in dir, merges its tensor- and
// pipeline-parallel shards (column-parallel tensors along dim 0, row-parallel ones along
// dim 1, the SwiGLU fc1 per rank into gate and up, layers renumbered by stage) and
// returns the GPT's Model and its global parameters under megago's names, at TP = 1
// (vocabulary padded for megago with zero rows). The configuration comes from the
// checkpoint's arguments (megatronConfig says which and how; megatronActivation which
// GeLU Megatron computes). Transformer Engine's _extra_state entries are skipped.
// Unknown tensors, architectures megago does not have and missing shards are errors
// naming the reason; replicated tensors that differ between TP ranks are
// MegatronInfo.Warnings.
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
	sh0, err := megatronStateDict(first, megatronRankFile(idir, 0, -1), info, true)
	if err != nil {
		return Model{}, nil, nil, err
	}
	if t, ok := sh0.tensors["embedding.word_embeddings.weight"]; ok && len(t.Shape) == 2 {
		info.PaddedVocab = t.Shape[0] * info.TP // if the arguments lack it
	}
	cfg, err := megatronConfig(a, opts.Vocab, info, info.Legacy)
	if err != nil {
		return Model{}, nil, nil, fmt.Errorf("checkpoint: %s: %w", idir, err)
	}
	shards, err := readMegatronShards(idir, info, sh0)
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

// megatronShard is one rank's model state dict.
type megatronShard struct {
	tp, pp  int
	tensors map[string]*torchTensor
}

// readMegatronShards reads every rank's state dict (sh0 is rank (0, 0)'s).
func readMegatronShards(idir string, info *MegatronInfo, sh0 megatronShard) ([]megatronShard, error) {
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
	out := []megatronShard{sh0}
	for pp := range info.PP {
		for tp := range info.TP {
			stage := pp
			if info.PP == 1 {
				stage = -1
			}
			if tp == 0 && pp == 0 {
				continue
			}
			v, err := readMegatronRank(idir, tp, stage)
			if err != nil {
				return nil, err
			}
			sh, err := megatronStateDict(v, megatronRankFile(idir, tp, stage), info, false)
			if err != nil {
				return nil, err
			}
			sh.tp, sh.pp = tp, pp
			out = append(out, sh)
		}
	}
	return out, nil
}

// maxStateDictDepth bounds the nesting of a legacy model's state dict (a few levels:
// language_model, embedding, word_embeddings).
const maxStateDictDepth = 8

// megatronStateDict returns the tensors of a rank's "model" state dict under
// Megatron-core's names (a legacy model's nested dicts flattened and renamed; its
// presence recorded in info.Legacy from the first rank's file, which every other rank
// must agree with).
func megatronStateDict(v any, path string, info *MegatronInfo, first bool) (megatronShard, error) {
	sh := megatronShard{tensors: map[string]*torchTensor{}}
	if _, ok := attr(v, "model0"); ok {
		return sh, fmt.Errorf("checkpoint: %s: virtual pipeline stages (model0, model1, ...) are not supported", path)
	}
	model, ok := attr(v, "model")
	if !ok {
		return sh, fmt.Errorf("checkpoint: %s has no \"model\" state dict", path)
	}
	_, legacy := attr(model, "language_model")
	if _, head := attr(model, "word_embeddings_for_head"); head {
		legacy = true
	}
	if first {
		info.Legacy = legacy
	} else if legacy != info.Legacy {
		return sh, fmt.Errorf("checkpoint: %s mixes legacy and Megatron-core model names with rank 0's file", path)
	}
	if legacy && info.CheckpointVersion < 2 {
		return sh, fmt.Errorf("checkpoint: %s: a legacy model of checkpoint_version %v (before 2.0) orders its QKV rows otherwise; load and save it with Megatron first", path, info.CheckpointVersion)
	}
	err := walkStateDict(model, "", 0, func(name string, val any) error {
		switch t := val.(type) {
		case *torchTensor:
			if legacy {
				var err error
				if name, err = legacyName(name); err != nil {
					return fmt.Errorf("checkpoint: %s: %w", path, err)
				}
			}
			if name != "" {
				sh.tensors[name] = t
			}
		case nil:
		default:
			if !strings.HasSuffix(name, "_extra_state") {
				return fmt.Errorf("checkpoint: %s: state dict entry %s is a %T, not a tensor", path, name, val)
			}
		}
		return nil
	})
	return sh, err
}

// walkStateDict calls f with the full dotted name of every entry of a state dict that
// is not itself a dict.
func walkStateDict(d any, prefix string, depth int, f func(name string, val any) error) error {
	visit := func(k, val any) error {
		name, ok := k.(string)
		if !ok {
			return fmt.Errorf("checkpoint: state dict key %v is not a string", k)
		}
		switch val.(type) {
		case *types.Dict, *types.OrderedDict:
			if depth == maxStateDictDepth {
				return fmt.Errorf("checkpoint: state dict %s nests deeper than %d", prefix+name, maxStateDictDepth)
			}
			return walkStateDict(val, prefix+name+".", depth+1, f)
		}
		return f(prefix+name, val)
	}
	entries, ok := dictEntries(d)
	if !ok {
		return fmt.Errorf("checkpoint: \"model\" is a %T, not a state dict", d)
	}
	for _, e := range entries {
		if err := visit(e.Key, e.Value); err != nil {
			return err
		}
	}
	return nil
}

// dictEntries returns the entries of an unpickled dict or OrderedDict in their order,
// and false for any other value.
func dictEntries(v any) ([]types.DictEntry, bool) {
	switch d := v.(type) {
	case *types.OrderedDict:
		var out []types.DictEntry
		for e := d.List.Front(); e != nil; e = e.Next() {
			oe := e.Value.(*types.OrderedDictEntry)
			out = append(out, types.DictEntry{Key: oe.Key, Value: oe.Value})
		}
		return out, true
	case *types.Dict:
		return *d, true
	}
	return nil, false
}
