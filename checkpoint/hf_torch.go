package checkpoint

import (
	"fmt"

	"github.com/nlpodyssey/gopickle/types"

	"megago/tensor"
)

// Reading pytorch_model.bin: a torch.save zip archive (see torch.go) of a state dict,
// an OrderedDict of tensor names to tensors, as save_pretrained writes it with
// safe_serialization=False and transformers before 4.35 by default.

// readTorchStateDict reads the state dict of the torch.save file path onto the CPU
// device dev. Tensors sharing a storage (tied weights) are read as copies.
func readTorchStateDict(dev *tensor.Device, path string) (map[string]*tensor.Tensor, error) {
	v, err := readTorchFile(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return stateDictTensors(dev, v, path)
}

// stateDictTensors returns the tensors of the unpickled state dict v of file path.
func stateDictTensors(dev *tensor.Device, v any, path string) (map[string]*tensor.Tensor, error) {
	entries, ok := dictEntries(v)
	if d, isObj := v.(*pyObject); isObj { // collections.OrderedDict, which findTorchClass leaves generic
		if d.class.module != "collections" || d.class.name != "OrderedDict" {
			return nil, fmt.Errorf("checkpoint: %s holds a %s.%s, not a state dict", path, d.class.module, d.class.name)
		}
		for _, k := range sortedKeys(d.dict) {
			entries = append(entries, types.DictEntry{Key: k, Value: d.dict[k]})
		}
		ok = true
	}
	if !ok {
		return nil, fmt.Errorf("checkpoint: %s holds a %T, not a state dict", path, v)
	}
	out := map[string]*tensor.Tensor{}
	for _, e := range entries {
		name, ok := e.Key.(string)
		if !ok {
			return nil, fmt.Errorf("checkpoint: %s: state dict key %v is not a string", path, e.Key)
		}
		tt, ok := e.Value.(*torchTensor)
		if !ok {
			return nil, fmt.Errorf("checkpoint: %s: state dict entry %q is a %T, not a tensor", path, name, e.Value)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("checkpoint: %s: state dict entry %q appears twice", path, name)
		}
		t, err := tt.Tensor(dev)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: %s: %s: %w", path, name, err)
		}
		out[name] = t
	}
	return out, nil
}
