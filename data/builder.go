package data

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"megago/internal/atomicfile"
)

// IndexedBuilder writes a Megatron indexed dataset, PREFIX.bin and PREFIX.idx, the way
// Megatron's IndexedDatasetBuilder does: sequences are appended with AddSequence, and
// EndDocument closes a document. Its memory does not grow with the dataset: tokens go
// straight to a temporary .bin, and the sequence lengths and document indices are spilled
// to temporary files beside it until Finalize assembles the .idx. Nothing appears under the
// final names before Finalize, which fsyncs both files and renames them into place.
//
// An IndexedBuilder is not safe for concurrent use. Call Close (a no-op after Finalize) to
// remove the temporary files of a builder that is abandoned. An id that does not fit the
// dtype is rejected before anything is written; after any other error (an I/O error) the
// builder must be closed.
type IndexedBuilder struct {
	prefix string
	dtype  DType
	bin    *spillFile // tokens
	lens   *spillFile // int32 per sequence
	docs   *spillFile // int64 per document boundary after the leading 0
	n, d   int64      // sequences and document-index entries written (d counts the leading 0)
	scr    []byte     // encoding scratch
	idx    *spillFile // the finished .idx (between finish and commit)
	done   bool       // Finalize or Close has run
}

// NewIndexedBuilder starts a dataset at prefix whose tokens are stored as dtype (see
// DTypeForVocab). It creates its temporary files in prefix's directory, with permission
// 0644 under the umask (the finished files keep it), after removing those that builders
// of prefix killed before finishing left there.
func NewIndexedBuilder(prefix string, dtype DType) (*IndexedBuilder, error) {
	if !dtype.Valid() {
		return nil, fmt.Errorf("data: new indexed dataset %s: invalid dtype code %d", prefix, uint8(dtype))
	}
	_, _ = removeStaleSpills(prefix) // best effort: a leftover that stays is only litter
	b := &IndexedBuilder{prefix: prefix, dtype: dtype, d: 1}
	var err error
	for _, s := range []struct {
		f   **spillFile
		ext string
	}{{&b.bin, ".bin"}, {&b.lens, ".lengths"}, {&b.docs, ".docs"}} {
		if *s.f, err = newSpillFile(prefix, s.ext); err != nil {
			b.Close()
			return nil, fmt.Errorf("data: new indexed dataset: %w", err)
		}
	}
	return b, nil
}

// DType returns the dtype the builder writes.
func (b *IndexedBuilder) DType() DType { return b.dtype }

// NumSequences returns the number of sequences added so far.
func (b *IndexedBuilder) NumSequences() int64 { return b.n }

// NumDocuments returns the number of documents ended so far.
func (b *IndexedBuilder) NumDocuments() int64 { return b.d - 1 }

// AddSequence appends one sequence of token ids (Megatron's add_item). It returns an error
// if an id does not fit the dtype or a write fails. It panics after Finalize or Close.
func (b *IndexedBuilder) AddSequence(ids []int32) error {
	b.checkOpen("AddSequence")
	if err := b.writeTokens(ids); err != nil {
		return err
	}
	return b.addLength(len(ids))
}

// EndDocument closes the current document: the sequences added since the previous
// EndDocument (none for an empty document) form one document. It panics after Finalize or
// Close.
func (b *IndexedBuilder) EndDocument() error {
	b.checkOpen("EndDocument")
	b.d++
	return b.docs.writeUint64(uint64(b.n))
}

// AddDocument appends a whole document (Megatron's add_document): ids holds its sequences
// back to back, lengths their lengths. An empty lengths adds an empty document. It panics if
// the lengths do not sum to len(ids) or are negative, or after Finalize or Close.
func (b *IndexedBuilder) AddDocument(ids []int32, lengths []int) error {
	b.checkOpen("AddDocument")
	sum := 0
	for _, n := range lengths {
		if n < 0 {
			panic(fmt.Sprintf("data: IndexedBuilder.AddDocument: negative length %d", n))
		}
		sum += n
	}
	if sum != len(ids) {
		panic(fmt.Sprintf("data: IndexedBuilder.AddDocument: lengths sum to %d, have %d ids", sum, len(ids)))
	}
	if err := b.writeTokens(ids); err != nil {
		return err
	}
	for _, n := range lengths {
		if err := b.addLength(n); err != nil {
			return err
		}
	}
	return b.EndDocument()
}

// AddIndexed appends the whole dataset at prefix (Megatron's add_index): its sequences, its
// documents (its document indices offset by the sequences already added, without its leading
// 0) and its .bin bytes. Its dtype must equal the builder's. Sequences added since the last
// EndDocument join its first document, as in Megatron. Sequence modes are not carried over.
// It panics after Finalize or Close.
func (b *IndexedBuilder) AddIndexed(prefix string) error {
	b.checkOpen("AddIndexed")
	src, err := OpenIndexed(prefix, ReadMmap) // pages in and out as it is copied
	if err != nil {
		return err // names the file and what is wrong
	}
	defer src.Close()
	if src.DType() != b.dtype {
		return fmt.Errorf("data: merge %s into %s: its dtype is %s, want %s", prefix, b.prefix, src.DType(), b.dtype)
	}
	offset := b.n
	for i := range src.NumSequences() {
		if err := b.addLength(src.SequenceLen(i)); err != nil {
			return err
		}
	}
	for j := 1; j <= src.NumDocuments(); j++ {
		b.d++
		if err := b.docs.writeUint64(uint64(offset + int64(src.idx.doc(j)))); err != nil {
			return err
		}
	}
	if _, err := b.bin.w.Write(src.bin); err != nil {
		return fmt.Errorf("data: merge %s into %s: %w", prefix, b.prefix, err)
	}
	return nil
}

// Finalize writes PREFIX.idx, fsyncs both files and renames them from their temporary names
// to PREFIX.bin and PREFIX.idx. On error the temporary files are removed. It panics after
// Finalize or Close.
func (b *IndexedBuilder) Finalize() error {
	if err := b.finish(); err != nil {
		return err
	}
	return b.commit()
}

// Close removes the temporary files of a builder that was not finalized; after Finalize it
// does nothing. It is safe to call more than once.
func (b *IndexedBuilder) Close() error {
	b.done = true
	var errs []error
	for _, s := range []**spillFile{&b.bin, &b.lens, &b.docs, &b.idx} {
		if *s != nil {
			errs = append(errs, (*s).remove())
			*s = nil
		}
	}
	return errors.Join(errs...)
}

// finish writes the .idx under a temporary name and fsyncs it and the .bin; commit then
// renames both. Preprocess finishes every key's builder before committing any.
func (b *IndexedBuilder) finish() (err error) {
	b.checkOpen("Finalize")
	defer func() {
		if err != nil {
			b.Close()
			err = fmt.Errorf("data: finalize %s: %w", b.prefix, err)
		}
	}()
	if err := b.bin.sync(); err != nil {
		return err
	}
	for _, s := range []*spillFile{b.lens, b.docs} {
		if err := s.rewind(); err != nil {
			return err
		}
	}
	if b.idx, err = newSpillFile(b.prefix, ".idx"); err != nil {
		return err
	}
	if err := b.writeIndex(b.idx.w); err != nil {
		return err
	}
	if err := b.idx.sync(); err != nil {
		return err
	}
	b.lens.remove()
	b.docs.remove()
	b.lens, b.docs = nil, nil
	b.done = true
	return nil
}

// writeIndex writes the header and arrays, reading the spilled lengths twice (as lengths,
// then as running pointers) and the spilled document indices once.
func (b *IndexedBuilder) writeIndex(w *bufio.Writer) error {
	var hdr [idxHeaderSize]byte
	copy(hdr[:], idxMagic)
	le := binary.LittleEndian
	le.PutUint64(hdr[offVersion:], idxVersion)
	hdr[offDType] = byte(b.dtype)
	le.PutUint64(hdr[offSeqCount:], uint64(b.n))
	le.PutUint64(hdr[offDocCount:], uint64(b.d))
	w.Write(hdr[:])
	if _, err := io.Copy(w, b.lens.r); err != nil {
		return err
	}
	if err := b.lens.rewind(); err != nil {
		return err
	}
	item := int64(b.dtype.Size())
	var p int64
	var buf [8]byte
	for range b.n {
		if _, err := io.ReadFull(b.lens.r, buf[:4]); err != nil {
			return err
		}
		n := int64(le.Uint32(buf[:4]))
		le.PutUint64(buf[:], uint64(p))
		w.Write(buf[:])
		p += n * item
	}
	le.PutUint64(buf[:], 0) // document_indices[0]; the spill holds the rest
	w.Write(buf[:])
	if _, err := io.Copy(w, b.docs.r); err != nil {
		return err
	}
	return w.Flush()
}

// commit renames the finished files into place and syncs the directory.
func (b *IndexedBuilder) commit() error {
	idxPath, binPath := IndexedPaths(b.prefix)
	if err := b.bin.commit(binPath); err != nil {
		b.Close()
		return fmt.Errorf("data: finalize %s: %w", b.prefix, err)
	}
	b.bin = nil
	if err := b.idx.commit(idxPath); err != nil {
		os.Remove(binPath) // no .bin without its .idx under the final names
		b.Close()
		return fmt.Errorf("data: finalize %s: %w", b.prefix, err)
	}
	b.idx = nil
	_ = atomicfile.SyncDir(filepath.Dir(b.prefix)) // best effort: some file systems cannot sync a directory
	return nil
}

func (b *IndexedBuilder) writeTokens(ids []int32) error {
	for _, id := range ids {
		if !b.dtype.fits(id) {
			return fmt.Errorf("data: write indexed dataset %s: token id %d does not fit dtype %s", b.prefix, id, b.dtype)
		}
	}
	b.scr = b.dtype.appendEncoded(b.scr[:0], ids)
	_, err := b.bin.w.Write(b.scr)
	return err
}

func (b *IndexedBuilder) addLength(n int) error {
	if n > math.MaxInt32 {
		return fmt.Errorf("data: write indexed dataset %s: sequence of %d tokens is longer than int32 allows", b.prefix, n)
	}
	b.n++
	return b.lens.writeUint32(uint32(n))
}

func (b *IndexedBuilder) checkOpen(op string) {
	if b.done {
		panic("data: IndexedBuilder." + op + ": builder for " + b.prefix + " already finalized or closed")
	}
}
