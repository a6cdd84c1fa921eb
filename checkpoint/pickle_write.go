package checkpoint

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
)

// Writing Python pickles (protocol 2, what torch.save writes) of the few kinds of values
// a Megatron checkpoint holds. The opcodes are those Python's own pickler chooses for
// the same value (pickle.dumps(v, 2) after pickletools.optimize drops its unused memo
// entries), so the output can be compared byte for byte with Python's.

// pickleTuple is a Python tuple.
type pickleTuple []any

// pickleItem is one key and value of a dict.
type pickleItem struct {
	Key   any
	Value any
}

// pickleDict is a Python dict, in insertion order.
type pickleDict []pickleItem

// pickleOrderedDict is a collections.OrderedDict (a state dict).
type pickleOrderedDict []pickleItem

// pickleNamespace is an argparse.Namespace: its attributes in order.
type pickleNamespace []pickleItem

// pickleGlobal is a module-level Python object named by module and name (a class, a
// torch dtype such as torch.float32).
type pickleGlobal struct{ Module, Name string }

// pickleTensor is a contiguous CPU tensor with a storage of its own: the storage class
// ("FloatStorage", "BFloat16Storage", ...), shape and row-major bytes.
type pickleTensor struct {
	Storage string
	Shape   []int
	Data    []byte
}

// pickler writes one pickle into buf; the tensors' storages are collected in storages
// (key i is storages[i]), to be written as records beside the pickle.
type pickler struct {
	buf      bytes.Buffer
	storages []*pickleTensor
}

// Pickle opcodes used by the writer.
const (
	opProto      = 0x80
	opStop       = '.'
	opNone       = 'N'
	opNewTrue    = 0x88
	opNewFalse   = 0x89
	opBinInt     = 'J'
	opBinInt1    = 'K'
	opBinInt2    = 'M'
	opLong1      = 0x8a
	opBinFloat   = 'G'
	opBinUnicode = 'X'
	opMark       = '('
	opEmptyTuple = ')'
	opTuple      = 't'
	opTuple1     = 0x85
	opEmptyList  = ']'
	opAppend     = 'a'
	opAppends    = 'e'
	opEmptyDict  = '}'
	opSetItem    = 's'
	opSetItems   = 'u'
	opGlobal     = 'c'
	opReduce     = 'R'
	opNewObj     = 0x81
	opBuild      = 'b'
	opBinPersID  = 'Q'
)

// pickleBatch is how many items Python's pickler puts under one MARK.
const pickleBatch = 1000

// picklePayload returns the pickle of v (protocol 2) and the storages its tensors refer
// to. It panics on a value of a type it does not write (a caller bug).
func picklePayload(v any) ([]byte, []*pickleTensor) {
	var p pickler
	p.buf.Write([]byte{opProto, 2})
	p.save(v)
	p.buf.WriteByte(opStop)
	return p.buf.Bytes(), p.storages
}

// save writes v.
func (p *pickler) save(v any) {
	switch x := v.(type) {
	case nil:
		p.buf.WriteByte(opNone)
	case bool:
		if x {
			p.buf.WriteByte(opNewTrue)
		} else {
			p.buf.WriteByte(opNewFalse)
		}
	case int:
		p.int(x)
	case float64:
		p.buf.WriteByte(opBinFloat)
		p.buf.Write(binary.BigEndian.AppendUint64(nil, math.Float64bits(x)))
	case string:
		p.buf.WriteByte(opBinUnicode)
		p.buf.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(x))))
		p.buf.WriteString(x)
	case pickleTuple:
		p.tuple(x...)
	case []any:
		p.buf.WriteByte(opEmptyList)
		p.batch(len(x), opAppend, opAppends, func(i int) { p.save(x[i]) })
	case pickleDict:
		p.buf.WriteByte(opEmptyDict)
		p.items(x)
	case pickleOrderedDict:
		p.global("collections", "OrderedDict")
		p.buf.Write([]byte{opEmptyTuple, opReduce})
		p.items(x)
	case pickleNamespace:
		p.global("argparse", "Namespace")
		p.buf.Write([]byte{opEmptyTuple, opNewObj})
		p.save(pickleDict(x))
		p.buf.WriteByte(opBuild)
	case pickleGlobal:
		p.global(x.Module, x.Name)
	case *pickleTensor:
		p.tensor(x)
	default:
		panic(fmt.Sprintf("checkpoint: pickling a %T is not supported", v))
	}
}

// int writes an int with the shortest opcode Python's pickler uses for it.
func (p *pickler) int(x int) {
	switch {
	case x >= 0 && x < 1<<8:
		p.buf.Write([]byte{opBinInt1, byte(x)})
	case x >= 0 && x < 1<<16:
		p.buf.WriteByte(opBinInt2)
		p.buf.Write(binary.LittleEndian.AppendUint16(nil, uint16(x)))
	case x >= math.MinInt32 && x <= math.MaxInt32:
		p.buf.WriteByte(opBinInt)
		p.buf.Write(binary.LittleEndian.AppendUint32(nil, uint32(int32(x))))
	default: // LONG1: little-endian two's complement in as few bytes as keep the sign
		le := binary.LittleEndian.AppendUint64(nil, uint64(x))
		n := len(le)
		for n > 1 && (le[n-1] == 0 && le[n-2] < 0x80 || le[n-1] == 0xff && le[n-2] >= 0x80) {
			n--
		}
		p.buf.Write([]byte{opLong1, byte(n)})
		p.buf.Write(le[:n])
	}
}

// tuple writes a tuple of items as Python does: EMPTY_TUPLE, TUPLE1 to TUPLE3, or
// MARK ... TUPLE.
func (p *pickler) tuple(items ...any) {
	switch len(items) {
	case 0:
		p.buf.WriteByte(opEmptyTuple)
		return
	case 1, 2, 3:
		for _, it := range items {
			p.save(it)
		}
		p.buf.WriteByte(opTuple1 + byte(len(items)-1))
		return
	}
	p.buf.WriteByte(opMark)
	for _, it := range items {
		p.save(it)
	}
	p.buf.WriteByte(opTuple)
}

// items writes a dict's items onto the dict on the stack.
func (p *pickler) items(items []pickleItem) {
	p.batch(len(items), opSetItem, opSetItems, func(i int) {
		p.save(items[i].Key)
		p.save(items[i].Value)
	})
}

// batch writes n elements in batches of pickleBatch, as Python's _batch_appends and
// _batch_setitems do: a batch of one ends with one, a longer one is under a MARK and
// ends with many.
func (p *pickler) batch(n int, one, many byte, write func(i int)) {
	for start := 0; start < n; start += pickleBatch {
		end := min(start+pickleBatch, n)
		if end-start == 1 {
			write(start)
			p.buf.WriteByte(one)
			continue
		}
		p.buf.WriteByte(opMark)
		for i := start; i < end; i++ {
			write(i)
		}
		p.buf.WriteByte(many)
	}
}

// global writes GLOBAL module name.
func (p *pickler) global(module, name string) {
	p.buf.WriteByte(opGlobal)
	p.buf.WriteString(module + "\n" + name + "\n")
}

// tensor writes t as torch.save does: torch._utils._rebuild_tensor_v2(storage, 0,
// size, stride, False, OrderedDict()), the storage a persistent id ("storage",
// torch.<Storage>, key, "cpu", numel).
func (p *pickler) tensor(t *pickleTensor) {
	info, ok := torchStorages[t.Storage]
	if !ok || len(t.Data)%info.size != 0 {
		panic(fmt.Sprintf("checkpoint: pickling a tensor of storage %q with %d bytes", t.Storage, len(t.Data)))
	}
	numel := len(t.Data) / info.size
	size, stride := make(pickleTuple, len(t.Shape)), make(pickleTuple, len(t.Shape))
	n := 1
	for d := len(t.Shape) - 1; d >= 0; d-- {
		size[d], stride[d] = t.Shape[d], n
		n *= t.Shape[d]
	}
	if n != numel {
		panic(fmt.Sprintf("checkpoint: pickling a tensor of shape %v with %d elements", t.Shape, numel))
	}
	key := fmt.Sprint(len(p.storages))
	p.storages = append(p.storages, t)
	p.global("torch._utils", "_rebuild_tensor_v2")
	p.buf.WriteByte(opMark)
	p.tuple("storage", pickleGlobal{"torch", t.Storage}, key, "cpu", numel)
	p.buf.WriteByte(opBinPersID)
	p.save(0)
	p.save(size)
	p.save(stride)
	p.save(false)
	p.save(pickleOrderedDict(nil))
	p.buf.WriteByte(opTuple)
	p.buf.WriteByte(opReduce)
}
