package checkpoint

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"megago/internal/atomicfile"
	"megago/tensor"
)

// Writing a Hugging Face model's tensors in shards, as save_pretrained does with
// max_shard_size (huggingface_hub's split_torch_state_dict_into_shards).

// HFExportOptions are ExportHFWith's settings.
type HFExportOptions struct {
	// MaxShardSize, if not 0, is the most bytes of tensor data a safetensors file holds:
	// the tensors, in name order with layer numbers compared as numbers, fill
	// model-00001-of-0000N.safetensors, ... each up to MaxShardSize; a tensor larger
	// than that gets a shard of its own. model.safetensors.index.json maps each tensor
	// to its shard. Tensors that fit in one shard are written as model.safetensors.
	MaxShardSize int64
}

// hfShardName matches the weight files ExportHFWith writes (and removes when stale).
var hfShardName = regexp.MustCompile(`^model(-[0-9]{5}-of-[0-9]{5})?\.safetensors(\.index\.json)?$`)

// writeHFShards writes hf as model.safetensors, or in shards of at most maxShard bytes
// with an index when they do not fit in one, removing weight files of an earlier export
// that the new one does not write.
func writeHFShards(dir string, hf map[string]*tensor.Tensor, maxShard int64) error {
	shards := splitHFShards(hf, maxShard)
	names := []string{hfWeightsFile}
	weightMap := map[string]string{}
	var total int64
	if len(shards) > 1 {
		names = names[:0]
		for i, sh := range shards {
			name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
			names = append(names, name)
			for _, t := range sh {
				weightMap[t] = name
				total += int64(hf[t].Numel() * hf[t].DType().Size())
			}
		}
	}
	if err := removeStaleHFWeights(dir, names); err != nil {
		return err
	}
	for i, sh := range shards {
		part := map[string]*tensor.Tensor{}
		for _, t := range sh {
			part[t] = hf[t]
		}
		if err := WriteSafetensors(filepath.Join(dir, names[i]), part, map[string]string{"format": "pt"}); err != nil {
			return err
		}
	}
	if len(shards) < 2 {
		return nil
	}
	js, err := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}, "", "  ")
	if err != nil {
		return fmt.Errorf("checkpoint: index: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, hfWeightsFile+hfIndexSuffix), append(js, '\n')); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// splitHFShards splits the names of hf into shards of at most maxShard bytes (one shard
// when maxShard is 0), as huggingface_hub does: a tensor larger than maxShard is a shard
// of its own, and a tensor that would take the current shard past maxShard starts the
// next one.
func splitHFShards(hf map[string]*tensor.Tensor, maxShard int64) [][]string {
	names := sortedKeys(hf)
	slices.SortFunc(names, naturalCompare)
	if maxShard == 0 {
		return [][]string{names}
	}
	var shards [][]string
	var cur []string
	var size int64
	for _, name := range names {
		n := int64(hf[name].Numel() * hf[name].DType().Size())
		if n > maxShard {
			shards = append(shards, []string{name})
			continue
		}
		if size+n > maxShard && len(cur) > 0 {
			shards, cur, size = append(shards, cur), nil, 0
		}
		cur, size = append(cur, name), size+n
	}
	if len(cur) > 0 || len(shards) == 0 {
		shards = append(shards, cur)
	}
	return shards
}

// naturalCompare orders dotted names part by part, numbers as numbers
// (model.layers.2 before model.layers.10).
func naturalCompare(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		x, errX := strconv.Atoi(pa[i])
		y, errY := strconv.Atoi(pb[i])
		if errX == nil && errY == nil && x != y {
			return x - y
		}
		if c := strings.Compare(pa[i], pb[i]); c != 0 && (errX != nil || errY != nil) {
			return c
		}
	}
	if len(pa) != len(pb) {
		return len(pa) - len(pb)
	}
	return strings.Compare(a, b)
}

// removeStaleHFWeights removes from dir the safetensors weight files and index of an
// earlier export that are not among keep.
func removeStaleHFWeights(dir string, keep []string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	for _, e := range entries {
		if name := e.Name(); hfShardName.MatchString(name) && !slices.Contains(keep, name) && !e.IsDir() {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return fmt.Errorf("checkpoint: removing the stale %w", err)
			}
		}
	}
	return nil
}
