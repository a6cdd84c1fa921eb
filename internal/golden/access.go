package golden

import (
	"fmt"
	"math"
)

// Path returns the path the file was loaded from.
func (f *File) Path() string { return f.path }

func (f *File) config(key string) any {
	v, ok := f.Config[key]
	if !ok {
		f.missing("config key", key, sortedKeys(f.Config))
	}
	return v
}

// ConfigInt returns the integer config value key (e.g. "n_layer").
// It panics if key is missing or its value is not an integer.
func (f *File) ConfigInt(key string) int {
	v, ok := f.config(key).(float64)
	if !ok || v != math.Trunc(v) || math.Abs(v) > 1<<53 {
		panic(fmt.Sprintf("golden: %s: config %q is %v, not an integer", f.path, key, f.Config[key]))
	}
	return int(v)
}

// ConfigFloat returns the numeric config value key (e.g. "layer_norm_epsilon").
// It panics if key is missing or its value is not a number.
func (f *File) ConfigFloat(key string) float64 {
	v, ok := f.config(key).(float64)
	if !ok {
		panic(fmt.Sprintf("golden: %s: config %q is %v, not a number", f.path, key, f.Config[key]))
	}
	return v
}

// ConfigString returns the string config value key (e.g. "activation_function").
// It panics if key is missing or its value is not a string.
func (f *File) ConfigString(key string) string {
	v, ok := f.config(key).(string)
	if !ok {
		panic(fmt.Sprintf("golden: %s: config %q is %v, not a string", f.path, key, f.Config[key]))
	}
	return v
}

// ConfigBool returns the boolean config value key (e.g. "tie_word_embeddings").
// It panics if key is missing or its value is not a boolean.
func (f *File) ConfigBool(key string) bool {
	v, ok := f.config(key).(bool)
	if !ok {
		panic(fmt.Sprintf("golden: %s: config %q is %v, not a boolean", f.path, key, f.Config[key]))
	}
	return v
}

// Input returns the input name (e.g. "input_ids"). It panics if there is none.
func (f *File) Input(name string) IntTensor {
	t, ok := f.Inputs[name]
	if !ok {
		f.missing("input", name, sortedKeys(f.Inputs))
	}
	return t
}

// Param returns the parameter with the Hugging Face name (or alias) name.
// It panics if there is none.
func (f *File) Param(name string) Tensor {
	t, ok := f.Params[f.resolve(name)]
	if !ok {
		f.missing("param", name, f.ParamNames)
	}
	return t
}

// Grad returns the gradient of the parameter with the Hugging Face name (or alias) name.
// For a tied tensor it is the sum over all uses. It panics if there is none.
func (f *File) Grad(name string) Tensor {
	t, ok := f.Grads[f.resolve(name)]
	if !ok {
		f.missing("grad", name, f.ParamNames)
	}
	return t
}

// Output returns the extra output name (e.g. "last_hidden_state"). It panics if there is none.
func (f *File) Output(name string) Tensor {
	t, ok := f.Outputs[name]
	if !ok {
		f.missing("output", name, sortedKeys(f.Outputs))
	}
	return t
}

// Table returns the integer table name. It panics if there is none.
func (f *File) Table(name string) IntTensor {
	t, ok := f.Tables[name]
	if !ok {
		f.missing("table", name, sortedKeys(f.Tables))
	}
	return t
}

func (f *File) resolve(name string) string {
	if target, ok := f.Aliases[name]; ok {
		return target
	}
	return name
}

// Numel returns the number of elements of t.
func (t Tensor) Numel() int { return Numel(t.Shape) }

// Numel returns the number of elements of t.
func (t IntTensor) Numel() int { return Numel(t.Shape) }

// offset returns the row-major offset of idx in shape.
// It panics if idx has the wrong length or an index is out of range.
func offset(shape, idx []int) int {
	if len(idx) != len(shape) {
		panic(fmt.Sprintf("golden: index %v for shape %v", idx, shape))
	}
	off := 0
	for i, d := range shape {
		if idx[i] < 0 || idx[i] >= d {
			panic(fmt.Sprintf("golden: index %v out of range for shape %v", idx, shape))
		}
		off = off*d + idx[i]
	}
	return off
}

// At returns the element at idx. It panics if idx does not fit the shape.
func (t Tensor) At(idx ...int) float32 { return t.Data[offset(t.Shape, idx)] }

// At returns the element at idx. It panics if idx does not fit the shape.
func (t IntTensor) At(idx ...int) int32 { return t.Data[offset(t.Shape, idx)] }
