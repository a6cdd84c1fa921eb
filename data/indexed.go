package data

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"

	"github.com/edsrzf/mmap-go"
)

// ReadMode chooses how an IndexedDataset reads its files; Megatron's --dataset-impl names.
type ReadMode int

const (
	// ReadMmap maps the .idx and .bin files into memory (the default). Sequences are read
	// without copying; the kernel pages them in on first touch. The files must not be
	// truncated while mapped: reading past a file's new end faults (SIGBUS).
	ReadMmap ReadMode = iota
	// ReadCached reads both files into memory at open.
	ReadCached
	// ReadLazy reads the .idx into memory and the .bin with a positioned read per request,
	// mapping nothing. RawSequence and RawDocument are not available.
	ReadLazy
)

// String returns "mmap", "cached" or "lazy".
func (m ReadMode) String() string {
	switch m {
	case ReadMmap:
		return "mmap"
	case ReadCached:
		return "cached"
	case ReadLazy:
		return "lazy"
	}
	return fmt.Sprintf("ReadMode(%d)", int(m))
}

// ParseReadMode returns the ReadMode whose String is s.
func ParseReadMode(s string) (ReadMode, error) {
	for m := ReadMmap; m <= ReadLazy; m++ {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("data: unknown read mode %q (known: mmap, cached, lazy)", s)
}

// IndexedDataset reads a Megatron indexed dataset, the pair PREFIX.idx and PREFIX.bin. It
// implements TokenSource. It is safe for concurrent use until Close.
type IndexedDataset struct {
	prefix string
	mode   ReadMode
	idx    *index
	bin    []byte   // the .bin contents (mmap, cached); nil when lazy or empty
	binF   *os.File // the open .bin (lazy)
	maps   []mmap.MMap

	digestOnce sync.Once
	digest     string // IndexDigest, computed on first use
}

var _ TokenSource = (*IndexedDataset)(nil)

// IndexedPaths returns the .idx and .bin paths of prefix.
func IndexedPaths(prefix string) (idxPath, binPath string) {
	return prefix + ".idx", prefix + ".bin"
}

// OpenIndexed opens the dataset prefix.idx + prefix.bin in mode and validates the index
// against the data file (see IndexError; validation reads the whole .idx once). Errors name
// the file.
func OpenIndexed(prefix string, mode ReadMode) (_ *IndexedDataset, err error) {
	idxPath, binPath := IndexedPaths(prefix)
	ds := &IndexedDataset{prefix: prefix, mode: mode}
	defer func() {
		if err != nil {
			ds.Close()
		}
	}()
	var idxBytes []byte
	switch mode {
	case ReadMmap:
		if idxBytes, err = ds.mapFile(idxPath); err != nil {
			return nil, err
		}
		if ds.bin, err = ds.mapFile(binPath); err != nil {
			return nil, err
		}
	case ReadCached, ReadLazy:
		if idxBytes, err = os.ReadFile(idxPath); err != nil {
			return nil, fmt.Errorf("data: open indexed dataset: %w", err)
		}
		if mode == ReadCached {
			if ds.bin, err = os.ReadFile(binPath); err != nil {
				return nil, fmt.Errorf("data: open indexed dataset: %w", err)
			}
		} else if ds.binF, err = os.Open(binPath); err != nil {
			return nil, fmt.Errorf("data: open indexed dataset: %w", err)
		}
	default:
		return nil, fmt.Errorf("data: open indexed dataset %s: unknown read mode %d", prefix, int(mode))
	}
	binSize := int64(len(ds.bin))
	if ds.binF != nil {
		st, err := ds.binF.Stat()
		if err != nil {
			return nil, fmt.Errorf("data: open indexed dataset: %w", err)
		}
		binSize = st.Size()
	}
	if ds.idx, err = parseIndex(idxPath, idxBytes, binPath, binSize); err != nil {
		return nil, err
	}
	return ds, nil
}

// mapFile maps path read-only and keeps the mapping for Close. An empty file gives nil.
func (ds *IndexedDataset) mapFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("data: open indexed dataset: %w", err)
	}
	defer f.Close() // the mapping outlives the descriptor
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("data: open indexed dataset: %w", err)
	}
	if st.Size() == 0 {
		return nil, nil
	}
	m, err := mmap.Map(f, mmap.RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("data: map %s: %w", path, err)
	}
	ds.maps = append(ds.maps, m)
	return m, nil
}

// Close releases the files and mappings. Slices returned by RawSequence and RawDocument are
// invalid afterwards (reading them may crash with a mapped file).
func (ds *IndexedDataset) Close() error {
	var errs []error
	for _, m := range ds.maps {
		errs = append(errs, m.Unmap())
	}
	ds.maps = nil
	if ds.binF != nil {
		errs = append(errs, ds.binF.Close())
		ds.binF = nil
	}
	ds.bin, ds.idx = nil, nil
	return errors.Join(errs...)
}

// IndexDigest returns the SHA-256 of the .idx file as read at open, in hex: it changes
// whenever a sequence length, pointer or document boundary does. Dataset index caches
// are keyed by it. It is computed once, on first use.
func (ds *IndexedDataset) IndexDigest() string {
	ds.digestOnce.Do(func() {
		sum := sha256.Sum256(ds.idx.b)
		ds.digest = hex.EncodeToString(sum[:])
	})
	return ds.digest
}

// Prefix returns the path prefix the dataset was opened with.
func (ds *IndexedDataset) Prefix() string { return ds.prefix }

// Mode returns the read mode.
func (ds *IndexedDataset) Mode() ReadMode { return ds.mode }

// DType returns the dtype of the tokens.
func (ds *IndexedDataset) DType() DType { return ds.idx.dtype }

// NumSequences returns the number of sequences N.
func (ds *IndexedDataset) NumSequences() int { return ds.idx.n }

// NumDocuments returns the number of documents, D − 1.
func (ds *IndexedDataset) NumDocuments() int { return ds.idx.d - 1 }

// NumTokens returns the total number of tokens, the size of the .bin over the item size.
func (ds *IndexedDataset) NumTokens() int64 {
	if ds.idx.n == 0 {
		return 0
	}
	last := ds.idx.n - 1
	return ds.idx.pointer(last)/int64(ds.idx.dtype.Size()) + int64(ds.idx.length(last))
}

// SequenceLen returns the number of tokens of sequence i. It panics if i is out of range.
func (ds *IndexedDataset) SequenceLen(i int) int {
	ds.checkSeq("SequenceLen", i)
	return ds.idx.length(i)
}

// SequencePointer returns the byte offset of sequence i in the .bin file. It panics if i is
// out of range.
func (ds *IndexedDataset) SequencePointer(i int) int64 {
	ds.checkSeq("SequencePointer", i)
	return ds.idx.pointer(i)
}

// Document returns the sequences [start, end) of document j; start == end for an empty
// document. It panics if j is out of range.
func (ds *IndexedDataset) Document(j int) (start, end int) {
	if j < 0 || j >= ds.idx.d-1 {
		panic(fmt.Sprintf("data: IndexedDataset.Document: document %d out of range [0, %d)", j, ds.idx.d-1))
	}
	return ds.idx.doc(j), ds.idx.doc(j + 1)
}

// HasModes reports whether the .idx carries Megatron's optional sequence-modes array.
func (ds *IndexedDataset) HasModes() bool { return ds.idx.hasModes }

// SequenceMode returns the mode of sequence i. It panics if i is out of range or the dataset
// has no modes.
func (ds *IndexedDataset) SequenceMode(i int) int8 {
	ds.checkSeq("SequenceMode", i)
	if !ds.idx.hasModes {
		panic("data: IndexedDataset.SequenceMode: " + ds.prefix + " has no sequence modes")
	}
	return ds.idx.mode(i)
}

// RawSequence returns the bytes of sequence i in the .bin file, without copying: the
// little-endian tokens, DType().Size() bytes each. The slice aliases the mapping or cache;
// it must not be modified and is invalid after Close. It panics in ReadLazy mode (use
// ReadTokens) or if i is out of range.
func (ds *IndexedDataset) RawSequence(i int) []byte {
	ds.checkSeq("RawSequence", i)
	p := ds.idx.pointer(i)
	return ds.rawBytes("RawSequence", p, p+int64(ds.idx.length(i)*ds.idx.dtype.Size()))
}

// RawDocument returns the bytes of all sequences of document j, which are contiguous in the
// .bin file, without copying; see RawSequence. It panics in ReadLazy mode or if j is out of
// range.
func (ds *IndexedDataset) RawDocument(j int) []byte {
	start, end := ds.Document(j)
	if start == end {
		return ds.rawBytes("RawDocument", 0, 0)
	}
	last := end - 1
	return ds.rawBytes("RawDocument", ds.idx.pointer(start), ds.idx.pointer(last)+int64(ds.idx.length(last)*ds.idx.dtype.Size()))
}

func (ds *IndexedDataset) rawBytes(op string, from, to int64) []byte {
	if ds.mode == ReadLazy {
		panic("data: IndexedDataset." + op + ": not available in lazy read mode; use ReadTokens")
	}
	return ds.bin[from:to:to]
}

// ReadTokens appends tokens [offset, offset+n) of sequence i, converted to int32, to dst and
// returns it. In ReadLazy mode it reads the .bin file and returns any read error; in the
// other modes it cannot fail. It panics if the range is outside the sequence.
func (ds *IndexedDataset) ReadTokens(dst []int32, i, offset, n int) ([]int32, error) {
	ds.checkSeq("ReadTokens", i)
	if length := ds.idx.length(i); offset < 0 || n < 0 || offset > length-n {
		panic(fmt.Sprintf("data: IndexedDataset.ReadTokens: tokens [%d, %d) outside sequence %d of length %d", offset, offset+n, i, length))
	}
	item := ds.idx.dtype.Size()
	from := ds.idx.pointer(i) + int64(offset*item)
	dst = slices.Grow(dst, n)
	if ds.mode != ReadLazy {
		return ds.idx.dtype.appendDecoded(dst, ds.bin[from:from+int64(n*item)]), nil
	}
	buf := make([]byte, n*item)
	if _, err := ds.binF.ReadAt(buf, from); err != nil && !(errors.Is(err, io.EOF) && n == 0) {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // the file is shorter than its index says; io.EOF would read as the end of the data
		}
		return dst, fmt.Errorf("data: read sequence %d of %s.bin at byte %d: %w", i, ds.prefix, from, err)
	}
	return ds.idx.dtype.appendDecoded(dst, buf), nil
}

// AppendTokens appends tokens [offset, offset+n) of sequence i to dst as int32. It panics
// if the range is outside the sequence, or in ReadLazy mode if the read fails (the file
// was validated at open, so only a disk error or a file changed since can cause that);
// ReadTokens, which the datasets use, returns that error instead.
func (ds *IndexedDataset) AppendTokens(dst []int32, i, offset, n int) []int32 {
	dst, err := ds.ReadTokens(dst, i, offset, n)
	if err != nil {
		panic(err.Error())
	}
	return dst
}

func (ds *IndexedDataset) checkSeq(op string, i int) {
	if i < 0 || i >= ds.idx.n {
		panic(fmt.Sprintf("data: IndexedDataset.%s: sequence %d out of range [0, %d)", op, i, ds.idx.n))
	}
}
