package checkpoint

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/nlpodyssey/gopickle/pickle"
	"github.com/nlpodyssey/gopickle/types"

	"megago/tensor"
)

// Reading torch.save files (the zip format of PyTorch ≥ 1.6): archive/data.pkl is a
// pickle whose tensors refer, through persistent ids, to storages kept as records
// archive/data/<key>. The pickle is run by gopickle's Unpickler with this file's own
// class lookup and storage loading instead of gopickle's pytorch package, whose loader
// allocates each storage at the element count the pickle claims and which panics on some
// malformed input: here the pickle's opcodes are scanned first (scanPickle), every
// storage must match its record's actual size, every tensor must lie inside its storage,
// and a panic inside the unpickler is returned as an error. The scan also bounds the
// pickle's nesting and the unpickler's allocations (see scanPickle), and records are
// read into buffers of their declared size only after that size is checked.

// maxPickle bounds data.pkl (a Megatron checkpoint's is a few hundred kilobytes: the
// arguments and the structure; the tensors are separate records).
const maxPickle = 64 << 20

// torchTensor is a tensor read from a torch.save file: its elements in row-major order.
type torchTensor struct {
	Storage string       // the storage class: "FloatStorage", "BFloat16Storage", ...
	DType   tensor.DType // 0 for storages megago has no dtype for (bytes, bools, int8, int16)
	Shape   tensor.Shape
	Data    []byte
}

// Tensor returns t as a megago tensor on dev.
func (t *torchTensor) Tensor(dev *tensor.Device) (*tensor.Tensor, error) {
	if t.DType == 0 {
		return nil, fmt.Errorf("a torch %s tensor has no megago dtype", t.Storage)
	}
	return fromBytes(dev, t.DType, t.Shape, t.Data), nil
}

// torchStorages maps torch's storage classes to their element size and megago dtype.
var torchStorages = map[string]struct {
	size  int
	dtype tensor.DType
}{
	"FloatStorage": {4, tensor.F32}, "DoubleStorage": {8, tensor.F64}, "HalfStorage": {2, tensor.F16},
	"BFloat16Storage": {2, tensor.BF16}, "LongStorage": {8, tensor.I64}, "IntStorage": {4, tensor.I32},
	"ShortStorage": {2, 0}, "CharStorage": {1, 0}, "ByteStorage": {1, 0}, "BoolStorage": {1, 0},
}

// readTorchFile reads a torch.save file and returns the unpickled object.
func readTorchFile(name string) (any, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	v, err := readTorchZip(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}

// readTorchZip reads a torch.save zip archive of size bytes.
func readTorchZip(r io.ReaderAt, size int64) (v any, err error) {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, fmt.Errorf("not a PyTorch zip archive (only torch.save's zip format is read): %w", err)
	}
	records := map[string]*zip.File{}
	prefix := ""
	for _, f := range zr.File {
		if err := checkRecordSizes(f, size); err != nil {
			return nil, err
		}
		records[f.Name] = f
		if path.Base(f.Name) == "data.pkl" && strings.Count(f.Name, "/") == 1 {
			if prefix != "" {
				return nil, errors.New("the archive holds two data.pkl records")
			}
			prefix = path.Dir(f.Name)
		}
	}
	if prefix == "" {
		return nil, errors.New("the archive has no <name>/data.pkl record: not a torch.save file")
	}
	if bo, ok := records[prefix+"/byteorder"]; ok {
		b, err := readRecord(bo, 16)
		if err != nil {
			return nil, err
		}
		if string(b) != "little" {
			return nil, fmt.Errorf("byte order %q: only little-endian archives are read", b)
		}
	}
	pkl, err := readRecord(records[prefix+"/data.pkl"], maxPickle)
	if err != nil {
		return nil, err
	}
	return unpickle(pkl, func(key string, numel int, elem int) ([]byte, error) {
		rec, ok := records[prefix+"/data/"+key]
		if !ok {
			return nil, fmt.Errorf("storage %q has no record %s/data/%s", key, prefix, key)
		}
		n := int64(numel) * int64(elem)
		if numel < 0 || numel > 1<<40 || rec.UncompressedSize64 != uint64(n) {
			return nil, fmt.Errorf("storage %q of %d elements of %d bytes does not match its %d-byte record", key, numel, elem, rec.UncompressedSize64)
		}
		return readRecord(rec, n)
	})
}

// readRecord reads a zip record of at most limit bytes. Its declared size is checked
// against limit before anything is allocated, and the record must hold exactly that
// many bytes (the buffer is allocated once, at that size).
func readRecord(f *zip.File, limit int64) ([]byte, error) {
	if f.UncompressedSize64 > uint64(limit) {
		return nil, fmt.Errorf("record %s of %d bytes is larger than %d bytes", f.Name, f.UncompressedSize64, limit)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("record %s: %w", f.Name, err)
	}
	defer rc.Close()
	b := make([]byte, f.UncompressedSize64)
	if _, err := io.ReadFull(rc, b); err != nil {
		return nil, fmt.Errorf("record %s: %w", f.Name, err)
	}
	if n, err := io.Copy(io.Discard, io.LimitReader(rc, 1)); err != nil || n > 0 { // EOF checks the CRC
		return nil, fmt.Errorf("record %s does not hold its declared %d bytes (%v)", f.Name, len(b), err)
	}
	return b, nil
}

// maxDeflateRatio bounds a deflated record's size over its compressed size (deflate
// cannot exceed about 1032:1).
const maxDeflateRatio = 1100

// checkRecordSizes refuses a record whose declared sizes cannot be true of an archive of
// size bytes, before anything is allocated at those sizes. torch.save stores records
// uncompressed.
func checkRecordSizes(f *zip.File, size int64) error {
	c, u := f.CompressedSize64, f.UncompressedSize64
	switch {
	case c > uint64(size):
		return fmt.Errorf("record %s claims %d bytes, more than the archive's %d", f.Name, c, size)
	case f.Method == zip.Store && u != c:
		return fmt.Errorf("record %s is stored uncompressed in %d bytes but claims %d", f.Name, c, u)
	case f.Method != zip.Store && u/maxDeflateRatio > c+4096:
		return fmt.Errorf("record %s claims %d bytes from %d compressed ones", f.Name, u, c)
	}
	return nil
}

// storageLoader returns the bytes of storage key holding numel elements of elem bytes.
type storageLoader func(key string, numel, elem int) ([]byte, error)

// unpickle runs the pickle pkl (scanned first) with torch's classes and persistent ids.
func unpickle(pkl []byte, load storageLoader) (v any, err error) {
	if err := scanPickle(pkl); err != nil {
		return nil, err
	}
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, fmt.Errorf("pickle: malformed (%v)", p)
		}
	}()
	u := pickle.NewUnpickler(bytes.NewReader(pkl))
	u.FindClass = findTorchClass
	storages := map[string]*torchStorage{}
	u.PersistentLoad = func(id any) (any, error) {
		t, ok := id.(*types.Tuple)
		if !ok || t.Len() < 5 || t.Get(0) != "storage" {
			return nil, fmt.Errorf("pickle: persistent id %v is not a storage", id)
		}
		class, ok1 := t.Get(1).(*pyClass)
		key, ok2 := t.Get(2).(string)
		numel, ok3 := t.Get(4).(int)
		if !ok1 || !ok2 || !ok3 || class.module != "torch" {
			return nil, fmt.Errorf("pickle: persistent id %v is not a storage", id)
		}
		info, ok := torchStorages[class.name]
		if !ok {
			return nil, fmt.Errorf("pickle: storage class torch.%s is not supported", class.name)
		}
		if s, ok := storages[key]; ok {
			if s.class != class.name {
				return nil, fmt.Errorf("pickle: storage %q read as %s and %s", key, s.class, class.name)
			}
			return s, nil
		}
		data, err := load(key, numel, info.size)
		if err != nil {
			return nil, err
		}
		s := &torchStorage{class: class.name, elem: info.size, dtype: info.dtype, data: data}
		storages[key] = s
		return s, nil
	}
	return u.Load()
}

// torchStorage is a storage record.
type torchStorage struct {
	class string
	elem  int
	dtype tensor.DType
	data  []byte
}

// findTorchClass resolves the globals a checkpoint pickle names: torch's tensor
// rebuilders, and for anything else (storage classes, argparse.Namespace, numpy arrays
// and dtypes, torch dtypes) a generic class whose instances keep their arguments and
// state.
func findTorchClass(module, name string) (any, error) {
	switch module + "." + name {
	case "torch._utils._rebuild_tensor_v2":
		return callable(rebuildTensor), nil
	case "torch._utils._rebuild_parameter":
		return callable(func(args ...any) (any, error) {
			if len(args) < 1 {
				return nil, errors.New("_rebuild_parameter without data")
			}
			return args[0], nil
		}), nil
	case "_codecs.encode": // bytes pickled under protocol 2: encode(str, "latin1")
		return callable(func(args ...any) (any, error) {
			s, ok := args[0].(string)
			if len(args) != 2 || !ok {
				return nil, fmt.Errorf("_codecs.encode%v", args)
			}
			b := make([]byte, 0, len(s))
			for _, r := range s {
				b = append(b, byte(r))
			}
			return b, nil
		}), nil
	}
	return &pyClass{module: module, name: name}, nil
}

// callable is a Python function.
type callable func(args ...any) (any, error)

func (f callable) Call(args ...any) (any, error) { return f(args...) }

// pyClass is a Python class the reader does not model: calling or instantiating it
// gives a pyObject.
type pyClass struct{ module, name string }

func (c *pyClass) Call(args ...any) (any, error)  { return &pyObject{class: c, args: args}, nil }
func (c *pyClass) PyNew(args ...any) (any, error) { return &pyObject{class: c, args: args}, nil }

// pyObject is an instance of a pyClass: its constructor arguments and its state (an
// argparse.Namespace's state is the dict of its attributes).
type pyObject struct {
	class *pyClass
	args  []any
	state any
	dict  map[string]any
}

func (o *pyObject) PySetState(state any) error { o.state = state; return nil }

func (o *pyObject) PyDictSet(key, value any) error {
	k, ok := key.(string)
	if !ok {
		return fmt.Errorf("attribute name %v is not a string", key)
	}
	if o.dict == nil {
		o.dict = map[string]any{}
	}
	o.dict[k] = value
	return nil
}

// maxStateDepth bounds how deep attr follows objects' states (a pickle can make an
// object its own state).
const maxStateDepth = 16

// attr returns the attribute name of an object (from its state dict), or of a dict.
func attr(v any, name string) (any, bool) {
	return attrDepth(v, name, maxStateDepth)
}

func attrDepth(v any, name string, depth int) (any, bool) {
	switch o := v.(type) {
	case *pyObject:
		if x, ok := o.dict[name]; ok {
			return x, true
		}
		if depth == 0 {
			return nil, false
		}
		return attrDepth(o.state, name, depth-1)
	case *types.Dict:
		for _, e := range *o {
			if e.Key == name {
				return e.Value, true
			}
		}
	case *types.OrderedDict:
		if e, ok := o.Map[name]; ok {
			return e.Value, true
		}
	}
	return nil, false
}

// rebuildTensor is torch._utils._rebuild_tensor_v2(storage, offset, size, stride,
// requires_grad, backward_hooks[, metadata]): it checks that the view lies inside its
// storage and copies its elements out in row-major order.
func rebuildTensor(args ...any) (any, error) {
	if len(args) < 4 {
		return nil, fmt.Errorf("_rebuild_tensor_v2 with %d arguments", len(args))
	}
	s, ok := args[0].(*torchStorage)
	offset, ok2 := args[1].(int)
	size, ok3 := intTuple(args[2])
	stride, ok4 := intTuple(args[3])
	if !ok || !ok2 || !ok3 || !ok4 || len(size) != len(stride) || len(size) > stMaxRank {
		return nil, fmt.Errorf("_rebuild_tensor_v2%v: unexpected arguments", args[1:4])
	}
	storageLen := len(s.data) / s.elem
	if slices.Contains(size, 0) { // an empty tensor (Transformer Engine's _extra_state): no element to place
		for _, n := range size {
			if n < 0 || n > maxEmptyDim {
				return nil, fmt.Errorf("empty tensor of size %v", size)
			}
		}
		return &torchTensor{Storage: s.class, DType: s.dtype, Shape: tensor.Shape(size), Data: []byte{}}, nil
	}
	numel, last := 1, offset
	for i := range size {
		if size[i] < 0 || stride[i] < 0 || size[i] > storageLen || stride[i] > storageLen {
			return nil, fmt.Errorf("tensor of size %v stride %v in a storage of %d elements", size, stride, storageLen)
		}
		numel *= size[i]
		if numel > storageLen {
			return nil, fmt.Errorf("tensor of size %v is larger than its storage of %d elements", size, storageLen)
		}
		last += (size[i] - 1) * stride[i]
	}
	if offset < 0 || last >= storageLen {
		return nil, fmt.Errorf("tensor of size %v stride %v at offset %d outside its storage of %d elements", size, stride, offset, storageLen)
	}
	t := &torchTensor{Storage: s.class, DType: s.dtype, Shape: tensor.Shape(size), Data: make([]byte, numel*s.elem)}
	if contiguous(size, stride) {
		copy(t.Data, s.data[offset*s.elem:])
		return t, nil
	}
	idx := make([]int, len(size))
	for i := range numel {
		at := offset
		for d := range size {
			at += idx[d] * stride[d]
		}
		copy(t.Data[i*s.elem:(i+1)*s.elem], s.data[at*s.elem:])
		for d := len(size) - 1; d >= 0; d-- {
			if idx[d]++; idx[d] < size[d] {
				break
			}
			idx[d] = 0
		}
	}
	return t, nil
}

// maxEmptyDim bounds the dims of an empty tensor, which no storage size bounds.
const maxEmptyDim = 1 << 31

// contiguous reports whether stride is size's row-major stride (dims of size 1 aside).
func contiguous(size, stride []int) bool {
	want := 1
	for d := len(size) - 1; d >= 0; d-- {
		if size[d] != 1 && stride[d] != want {
			return false
		}
		want *= size[d]
	}
	return true
}

// intTuple returns a tuple of ints (a torch.Size) as a slice.
func intTuple(v any) ([]int, bool) {
	t, ok := v.(*types.Tuple)
	if !ok {
		return nil, false
	}
	out := make([]int, t.Len())
	for i := range out {
		if out[i], ok = t.Get(i).(int); !ok {
			return nil, false
		}
	}
	return out, true
}

// pyInt returns a Python int as an int.
func pyInt(v any) (int, bool) {
	switch x := v.(type) {
	case int:
		return x, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case *big.Int:
		if x.IsInt64() {
			return int(x.Int64()), true
		}
	}
	return 0, false
}
