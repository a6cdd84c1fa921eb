package checkpoint

import (
	"bytes"
	"encoding/binary"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nlpodyssey/gopickle/types"
)

// pickleSample is the value testdata/gen_pickle.py's sample() builds in Python.
func pickleSample() any {
	f32 := func(xs ...float32) []byte {
		var b []byte
		for _, x := range xs {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		}
		return b
	}
	state := pickleOrderedDict{
		{"w", &pickleTensor{"FloatStorage", []int{2, 3}, f32(0, 0.25, 0.5, 0.75, 1, 1.25)}},
		{"b", &pickleTensor{"BFloat16Storage", []int{2}, []byte{0xc0, 0x3f, 0x10, 0xc0}}}, // 1.5, −2.25
		{"s", &pickleTensor{"FloatStorage", []int{}, f32(7)}},
		{"e", &pickleTensor{"ByteStorage", []int{0}, nil}},
	}
	args := pickleNamespace{
		{"num_layers", 2}, {"hidden_size", 300}, {"ffn_hidden_size", 70000}, {"big", 1 << 40}, {"neg", -5},
		{"negbig", -(1 << 40)}, {"lr", 1e-4}, {"name", "GPT2BPETokenizer"}, {"none", nil}, {"yes", true}, {"no", false},
		{"params_dtype", pickleGlobal{"torch", "bfloat16"}}, {"sizes", []any{1, 2}}, {"pair", pickleTuple{3, "x"}},
		{"empty", []any{}}, {"one", []any{9}}, {"unicode", "ü→雪"},
	}
	return pickleDict{{"args", args}, {"checkpoint_version", 3.0}, {"iteration", 7}, {"model", state},
		{"single", pickleDict{{"k", 1}}}, {"empty", pickleDict{}}, {"od1", pickleOrderedDict{{"a", nil}}}}
}

// The writer's pickle and storages equal, byte for byte, what torch.save writes for the
// same value with a memo-free pickler (testdata/pickle/sample.pt, from gen_pickle.py).
func TestPickleGolden(t *testing.T) {
	golden := readFile(t, filepath.Join("testdata", "pickle", "sample.pt"))
	records, err := zipReader(golden)
	must(t, err)
	want := map[string][]byte{}
	for _, r := range records {
		b, err := readRecord(r, 1<<20)
		must(t, err)
		_, name, _ := strings.Cut(r.Name, "/")
		want[name] = b
	}
	pkl, storages := picklePayload(pickleSample())
	if !bytes.Equal(pkl, want["data.pkl"]) {
		t.Errorf("data.pkl differs from torch.save's:\n got %q\nwant %q", pkl, want["data.pkl"])
	}
	if len(storages) != 4 {
		t.Fatalf("%d storages, want 4", len(storages))
	}
	for i, s := range storages {
		if name := "data/" + string(rune('0'+i)); !bytes.Equal(s.Data, want[name]) {
			t.Errorf("storage %s: %x, torch.save wrote %x", name, s.Data, want[name])
		}
	}
}

// A written torch.save file reads back (through the gopickle-based reader) as the value
// written, with every record's data aligned to 64 bytes as PyTorch's writer aligns it.
func TestTorchZipRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	must(t, writeTorchZip(&buf, "model_optim_rng", pickleSample()))
	b := buf.Bytes()
	records, err := zipReader(b)
	must(t, err)
	for _, r := range records {
		at, err := r.DataOffset()
		must(t, err)
		if at%torchAlign != 0 {
			t.Errorf("record %s data at offset %d, not aligned to %d", r.Name, at, torchAlign)
		}
	}
	v, err := readTorchZip(bytes.NewReader(b), int64(len(b)))
	must(t, err)
	args, _ := attr(v, "args")
	a := megatronArgs{args}
	if a.int("hidden_size", 0) != 300 || a.int("big", 0) != 1<<40 || a.int("negbig", 0) != -(1<<40) ||
		a.string("unicode", "") != "ü→雪" || !a.bool("yes") || a.float("lr", 0) != 1e-4 {
		t.Errorf("arguments read back as %+v", args)
	}
	model, _ := attr(v, "model")
	w, _ := attr(model, "w")
	e, _ := attr(model, "e")
	wt, ok1 := w.(*torchTensor)
	et, ok2 := e.(*torchTensor)
	if !ok1 || !ok2 || !wt.Shape.Equal([]int{2, 3}) || len(et.Data) != 0 || !et.Shape.Equal([]int{0}) {
		t.Fatalf("tensors read back as %+v, %+v", w, e)
	}
	if got := math.Float32frombits(binary.LittleEndian.Uint32(wt.Data[20:])); got != 1.25 {
		t.Errorf("w[1][2] = %v, want 1.25", got)
	}
	if single, _ := attr(v, "single"); single == nil {
		t.Error("no dict \"single\"")
	} else if _, ok := single.(*types.Dict); !ok {
		t.Errorf("single is a %T", single)
	}
}

// Empty tensors (Transformer Engine's _extra_state) read whatever their storage, within
// bounds on their dims; a state dict nested too deep is refused.
func TestTorchEmptyTensorsAndNesting(t *testing.T) {
	read := func(v any) (any, error) {
		var buf bytes.Buffer
		must(t, writeTorchZip(&buf, "x", v))
		return readTorchZip(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	}
	for _, tc := range []struct {
		shape []int
		ok    bool
	}{{[]int{0}, true}, {[]int{4, 0}, true}, {[]int{0, 1 << 20}, true}, {[]int{0, 1 << 40}, false}} {
		v, err := read(pickleDict{{"e", &pickleTensor{Storage: "ByteStorage", Shape: tc.shape}}})
		if tc.ok != (err == nil) {
			t.Errorf("empty tensor of shape %v: %v", tc.shape, err)
			continue
		}
		if e, _ := attr(v, "e"); tc.ok && !e.(*torchTensor).Shape.Equal(tc.shape) {
			t.Errorf("empty tensor of shape %v read as %v", tc.shape, e)
		}
	}
	var nested any = pickleDict{{"w", &pickleTensor{Storage: "FloatStorage", Shape: []int{1}, Data: make([]byte, 4)}}}
	for range maxStateDictDepth + 1 {
		nested = pickleDict{{"m", nested}}
	}
	v, err := read(pickleDict{{"model", nested}})
	must(t, err)
	if _, err := megatronStateDict(v, "deep.pt", &MegatronInfo{}, true); err == nil || !strings.Contains(err.Error(), "nests deeper than") {
		t.Errorf("a state dict nested %d deep: %v", maxStateDictDepth+2, err)
	}
}
