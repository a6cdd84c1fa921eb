package golden

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
)

// Tensor is a row-major float32 tensor. A scalar has an empty Shape and one value.
type Tensor struct {
	Shape []int     `json:"shape"`
	Data  []float32 `json:"data"`
}

// IntTensor is a row-major integer tensor (token ids, masks, labels).
type IntTensor struct {
	Shape []int   `json:"shape"`
	Data  []int32 `json:"data"`
}

// File is one golden file: a model's configuration, inputs, parameters, and the outputs and
// gradients PyTorch computed from them.
type File struct {
	Model      string               `json:"model"`       // "gpt2", "bert", "t5" or "llama"
	Config     map[string]any       `json:"config"`      // Hugging Face config names; numbers are float64
	Inputs     map[string]IntTensor `json:"inputs"`      // input_ids, labels, attention_mask, ...
	ParamNames []string             `json:"param_names"` // state-dict order
	Params     map[string]Tensor    `json:"params"`      // Hugging Face state-dict name -> value
	Aliases    map[string]string    `json:"aliases"`     // other name of a tied tensor -> name in Params
	Logits     Tensor               `json:"logits"`      // [B, T, V]
	Loss       float64              `json:"loss"`        // a float32 value
	Grads      map[string]Tensor    `json:"grads"`       // d Loss / d Params[name]
	Outputs    map[string]Tensor    `json:"outputs"`     // intermediate activations, loss parts
	Tables     map[string]IntTensor `json:"tables"`      // other integer tensors
	Notes      []string             `json:"notes"`       // conventions, in words

	path string
}

// Load reads and checks the golden file at path. The error names the file and, when the
// file is malformed, the entry at fault.
func Load(path string) (*File, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("golden: %w", err)
	}
	f := &File{path: path}
	if err := json.Unmarshal(raw, f); err != nil {
		return nil, fmt.Errorf("golden: decode %s: %w", path, err)
	}
	var probe struct {
		Loss *float64 `json:"loss"`
	}
	if err := json.Unmarshal(raw, &probe); err == nil && probe.Loss == nil {
		return nil, fmt.Errorf(`golden: %s: missing "loss"`, path)
	}
	if err := f.validate(); err != nil {
		return nil, fmt.Errorf("golden: %s: %w", path, err)
	}
	return f, nil
}

// Numel returns the number of elements the shape holds (1 for an empty shape), or -1 if a
// dimension is negative.
func Numel(shape []int) int {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return -1
		}
		n *= d
	}
	return n
}

func checkShape(what string, shape []int, n int) error {
	want := Numel(shape)
	if want < 0 {
		return fmt.Errorf("%s: negative dimension in shape %v", what, shape)
	}
	if n != want {
		return fmt.Errorf("%s: %d values for shape %v, want %d", what, n, shape, want)
	}
	return nil
}

func (f *File) validate() error {
	switch {
	case f.Model == "":
		return errors.New(`missing "model"`)
	case len(f.Config) == 0:
		return errors.New(`missing "config"`)
	case len(f.Inputs) == 0:
		return errors.New(`missing "inputs"`)
	case len(f.Params) == 0:
		return errors.New(`missing "params"`)
	case len(f.Logits.Data) == 0:
		return errors.New(`missing "logits"`)
	case math.IsNaN(f.Loss) || math.IsInf(f.Loss, 0):
		return fmt.Errorf("loss is %v", f.Loss)
	}
	var errs []error
	for _, name := range sortedKeys(f.Inputs) {
		errs = append(errs, checkShape(fmt.Sprintf("inputs[%q]", name), f.Inputs[name].Shape, len(f.Inputs[name].Data)))
	}
	for _, name := range sortedKeys(f.Tables) {
		errs = append(errs, checkShape(fmt.Sprintf("tables[%q]", name), f.Tables[name].Shape, len(f.Tables[name].Data)))
	}
	for _, name := range sortedKeys(f.Outputs) {
		errs = append(errs, checkShape(fmt.Sprintf("outputs[%q]", name), f.Outputs[name].Shape, len(f.Outputs[name].Data)))
	}
	errs = append(errs, checkShape("logits", f.Logits.Shape, len(f.Logits.Data)))
	errs = append(errs, f.validateParams())
	return errors.Join(errs...)
}

// validateParams checks that ParamNames, Params and Grads agree and that aliases resolve.
func (f *File) validateParams() error {
	var errs []error
	seen := make(map[string]bool, len(f.ParamNames))
	for _, name := range f.ParamNames {
		if seen[name] {
			errs = append(errs, fmt.Errorf("param_names: %q listed twice", name))
		}
		seen[name] = true
		if _, ok := f.Params[name]; !ok {
			errs = append(errs, fmt.Errorf("param_names: %q has no entry in params", name))
		}
	}
	for _, name := range sortedKeys(f.Params) {
		p := f.Params[name]
		if !seen[name] {
			errs = append(errs, fmt.Errorf("params[%q]: missing from param_names", name))
		}
		errs = append(errs, checkShape(fmt.Sprintf("params[%q]", name), p.Shape, len(p.Data)))
		g, ok := f.Grads[name]
		if !ok {
			errs = append(errs, fmt.Errorf("params[%q]: no grad", name))
			continue
		}
		if !slices.Equal(g.Shape, p.Shape) {
			errs = append(errs, fmt.Errorf("grads[%q]: shape %v, param shape %v", name, g.Shape, p.Shape))
		}
		errs = append(errs, checkShape(fmt.Sprintf("grads[%q]", name), g.Shape, len(g.Data)))
	}
	for _, name := range sortedKeys(f.Grads) {
		if _, ok := f.Params[name]; !ok {
			errs = append(errs, fmt.Errorf("grads[%q]: no such param", name))
		}
	}
	for _, alias := range sortedKeys(f.Aliases) {
		if _, ok := f.Params[f.Aliases[alias]]; !ok {
			errs = append(errs, fmt.Errorf("aliases[%q]: target %q is not a param", alias, f.Aliases[alias]))
		}
		if _, ok := f.Params[alias]; ok {
			errs = append(errs, fmt.Errorf("aliases[%q]: also listed as a param", alias))
		}
	}
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// missing panics with the file, what was asked for, and the names the file has.
func (f *File) missing(kind, name string, have []string) {
	panic(fmt.Sprintf("golden: %s: no %s %q (have %s)", f.path, kind, name, strings.Join(have, ", ")))
}
