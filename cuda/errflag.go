package cuda

import (
	"encoding/binary"
	"fmt"
	"megago/cuda/internal/driver"
)

// errFlagBytes is the size of prelude.cu's ErrFlag: code, pad, pos, value, limit.
const errFlagBytes = 32

// Ops that kernels report bad indices for (ErrFlag.code).
const (
	opGather = iota + 1
	opScatterAdd
	opEmbedding
	opEmbeddingBackward
	opCrossEntropy
	opEncoder
	opVocabParallelCE
)

var errOpNames = map[int32]string{
	opGather: "Gather", opScatterAdd: "ScatterAdd", opEmbedding: "Embedding",
	opEmbeddingBackward: "Embedding backward", opCrossEntropy: "CrossEntropy", opEncoder: "Encoder",
	opVocabParallelCE: "VocabCrossEntropyStats",
}

// IndexError is an index out of range met by a kernel (an id beyond the vocabulary, a
// target beyond the classes). Kernels cannot stop the program, so they record the first
// one and give zeros; the backend panics with it at the next point where it waits for
// the device (ReadHost, Sync).
type IndexError struct {
	Op    string
	Pos   int64 // position of the index in its tensor
	Index int64
	Limit int64 // valid indices are [0, Limit)
}

func (e *IndexError) Error() string {
	return fmt.Sprintf("cuda: %s: index %d out of range [0, %d) at position %d", e.Op, e.Index, e.Limit, e.Pos)
}

// parseErrFlag decodes an ErrFlag; nil when no error was recorded.
func parseErrFlag(b []byte) *IndexError {
	le := binary.LittleEndian
	code := int32(le.Uint32(b))
	if code == 0 {
		return nil
	}
	name, ok := errOpNames[code]
	if !ok {
		name = fmt.Sprintf("kernel op %d", code)
	}
	return &IndexError{Op: name, Pos: int64(le.Uint64(b[8:])), Index: int64(le.Uint64(b[16:])), Limit: int64(le.Uint64(b[24:]))}
}

// flagArgs appends the ErrFlag pointer and op code to a kernel's arguments and marks the
// flag for checking.
func (b *Backend) flagArgs(a *driver.KernelArgs, op int32) *driver.KernelArgs {
	b.errMu.Lock()
	b.pending = true
	b.errMu.Unlock()
	return a.Ptr(b.errFlag).I32(op)
}

// checkErrors reads the ErrFlag when a reporting kernel ran since the last check (the
// device must be bound), clears it and panics with the *IndexError it holds.
func (b *Backend) checkErrors() {
	b.errMu.Lock()
	defer b.errMu.Unlock()
	if !b.pending {
		return
	}
	b.pending = false
	buf := make([]byte, errFlagBytes)
	b.must(b.dev.dtoh(buf, b.errFlag))
	if e := parseErrFlag(buf); e != nil {
		b.must(b.dev.memset(b.errFlag, 1, 0, errFlagBytes))
		panic(e)
	}
}
