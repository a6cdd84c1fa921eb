package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"megago/tensor"
)

// The weight files of a Hugging Face model directory, looked for in transformers'
// order: model.safetensors, model.safetensors.index.json, pytorch_model.bin,
// pytorch_model.bin.index.json. An index maps each tensor to the shard file holding it:
//
//	{"metadata": {"total_size": 123456}, "weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors", ...}}

const (
	hfIndexSuffix = ".index.json"
	hfTorchFile   = "pytorch_model.bin"
	// maxHFIndex bounds an index file (one of 10^5 tensors is a few megabytes).
	maxHFIndex = 64 << 20
)

// hfWeights says where a Hugging Face directory keeps its tensors.
type hfWeights struct {
	dir   string
	torch bool     // torch.save files, else safetensors
	index string   // the index file, "" for a single weight file
	files []string // the weight files (names in dir), sorted
	// owner maps each tensor the index lists to its file; nil without an index.
	owner map[string]string
}

// findHFWeights returns the weight files of the Hugging Face directory dir.
func findHFWeights(dir string) (*hfWeights, error) {
	for _, c := range []struct {
		name  string
		torch bool
	}{{hfWeightsFile, false}, {hfWeightsFile + hfIndexSuffix, false}, {hfTorchFile, true}, {hfTorchFile + hfIndexSuffix, true}} {
		path := filepath.Join(dir, c.name)
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		w := &hfWeights{dir: dir, torch: c.torch}
		if !strings.HasSuffix(c.name, hfIndexSuffix) {
			w.files = []string{c.name}
			return w, nil
		}
		owner, err := readHFIndex(path)
		if err != nil {
			return nil, err
		}
		w.index, w.owner = c.name, owner
		for _, f := range owner {
			if !slices.Contains(w.files, f) {
				w.files = append(w.files, f)
			}
		}
		slices.Sort(w.files)
		return w, nil
	}
	return nil, fmt.Errorf("checkpoint: %s has none of %s, %s, %s, %s", dir, hfWeightsFile, hfWeightsFile+hfIndexSuffix, hfTorchFile, hfTorchFile+hfIndexSuffix)
}

// readHFIndex reads an index file's weight_map, checking its size before reading it.
func readHFIndex(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if st.Size() > maxHFIndex {
		return nil, fmt.Errorf("checkpoint: %s: an index of %d bytes is larger than %d", path, st.Size(), maxHFIndex)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxHFIndex))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	owner, err := parseHFIndex(b)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	return owner, nil
}

// parseHFIndex parses an index's weight_map: a non-empty object of distinct tensor
// names, each naming a shard file inside the directory (a local path, see
// filepath.IsLocal).
func parseHFIndex(b []byte) (map[string]string, error) {
	var idx struct {
		WeightMap json.RawMessage `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("not an index: %w", err)
	}
	if idx.WeightMap == nil {
		return nil, errors.New("no weight_map")
	}
	dec := json.NewDecoder(bytes.NewReader(idx.WeightMap))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("weight_map is not an object")
	}
	owner := map[string]string{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("weight_map: %w", err)
		}
		name := k.(string) // an object's keys are strings
		v, err := dec.Token()
		file, ok := v.(string)
		if err != nil || !ok {
			return nil, fmt.Errorf("weight_map: %q maps to %v, not a file name", name, v)
		}
		if _, dup := owner[name]; dup {
			return nil, fmt.Errorf("weight_map lists %q twice", name)
		}
		if name == "" || !filepath.IsLocal(file) || filepath.Base(file) != file {
			return nil, fmt.Errorf("weight_map: %q is in %q, not a file name inside the directory", name, file)
		}
		owner[name] = file
	}
	if len(owner) == 0 {
		return nil, errors.New("weight_map is empty")
	}
	return owner, nil
}

// describe names the weights in messages: the file, or the index and its shards.
func (w *hfWeights) describe() string {
	if w.index == "" {
		return filepath.Join(w.dir, w.files[0])
	}
	return fmt.Sprintf("%s's %d shards", filepath.Join(w.dir, w.index), len(w.files))
}

// elements returns the number of elements of safetensors weights, from their headers.
func (w *hfWeights) elements() (int64, error) {
	var n int64
	for _, f := range w.files {
		k, err := safetensorsElements(filepath.Join(w.dir, f))
		if err != nil {
			return 0, err
		}
		n += k
	}
	return n, nil
}

// read reads every weight file onto the CPU and checks them against the index: every
// tensor the index lists is in the file it names, and no file holds a tensor the index
// does not list there (a tensor in two files, or in none the index names).
func (w *hfWeights) read() (map[string]*tensor.Tensor, error) {
	out := map[string]*tensor.Tensor{}
	from := map[string]string{}
	dev := tensor.NewCPU() // one device: the converter combines tensors of several files
	for _, f := range w.files {
		path := filepath.Join(w.dir, f)
		var ts map[string]*tensor.Tensor
		var err error
		if w.torch {
			ts, err = readTorchStateDict(dev, path)
		} else {
			ts, _, err = readSafetensorsOn(dev, path)
		}
		if err != nil {
			return nil, err
		}
		for _, name := range sortedKeys(ts) {
			if prev, ok := from[name]; ok {
				return nil, fmt.Errorf("checkpoint: %s: tensor %q is in %s and %s", w.describe(), name, prev, f)
			}
			if want, ok := w.owner[name]; w.owner != nil && (!ok || want != f) {
				return nil, fmt.Errorf("checkpoint: %s holds tensor %q, which %s does not list in it", path, name, w.index)
			}
			out[name], from[name] = ts[name], f
		}
	}
	for _, name := range sortedKeys(w.owner) {
		if _, ok := out[name]; !ok {
			return nil, fmt.Errorf("checkpoint: %s lists tensor %q in %s, which does not hold it", filepath.Join(w.dir, w.index), name, w.owner[name])
		}
	}
	return out, nil
}

// elementsOf returns the number of elements of tensors.
func elementsOf(tensors map[string]*tensor.Tensor) int64 {
	var n int64
	for _, t := range tensors {
		n += int64(t.Numel())
	}
	return n
}
