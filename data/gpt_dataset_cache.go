package data

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"megago/internal/atomicfile"
	"os"
	"path/filepath"
	"time"
)

// IndexCache says where a dataset's indices (GPT document, sample and shuffle indices;
// BERT and T5 sample mappings) are cached and which rank builds them.
//
// Synchronisation is by files, not by a collective, so package data needs no
// communicator: the one rank with Builder set builds missing indices and writes them
// under a temporary name that it renames into place, and every other rank polls for the
// file until its context ends. The ranks must therefore share Dir (a shared filesystem
// across hosts), and a non-builder's context should carry a timeout long enough for the
// build. When the file already exists every rank, builder or not, loads it.
type IndexCache struct {
	// Dir holds the cache files; "" disables caching and every rank builds the indices
	// in memory (they are deterministic, so all ranks agree).
	Dir string
	// Builder is true on the one rank (Megatron: global rank 0) that builds missing
	// indices; the others wait for its files.
	Builder bool
	// Poll is how often a waiting rank looks for the file; zero means 100ms.
	Poll time.Duration
}

// cacheMagic starts every cache file; the last two bytes are the format version.
const cacheMagic = "MGGIDX01"

// cacheKey is the file name stem of a description: kind and the first 128 bits of its
// SHA-256.
func cacheKey(kind, description string) string {
	sum := sha256.Sum256([]byte(description))
	return kind + "_" + hex.EncodeToString(sum[:16])
}

// loadOrBuild returns the int64 arrays that build makes for description, from the cache
// when possible. It returns the cache file's path ("" without a cache) and whether the
// arrays were loaded rather than built here.
func (c IndexCache) loadOrBuild(ctx context.Context, kind, description string, build func() ([][]int64, error)) (arrays [][]int64, path string, loaded bool, err error) {
	if c.Dir == "" {
		arrays, err = build()
		return arrays, "", false, err
	}
	stem := filepath.Join(c.Dir, cacheKey(kind, description))
	path = stem + ".mgidx"
	arrays, err = readIndexFile(path)
	if err == nil {
		return arrays, path, true, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, path, false, err
	}
	if !c.Builder {
		arrays, err = c.wait(ctx, path)
		return arrays, path, err == nil, err
	}
	if arrays, err = build(); err != nil {
		return nil, path, false, err
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, path, false, fmt.Errorf("data: index cache: %w", err)
	}
	for _, p := range []string{stem + ".txt", path} { // left by a builder that was killed
		_, _ = atomicfile.RemoveStale(c.Dir, atomicfile.TempPrefix(p))
	}
	if err := atomicfile.WriteFile(stem+".txt", []byte(description)); err != nil {
		return nil, path, false, fmt.Errorf("data: index cache: %w", err)
	}
	if err := atomicfile.Write(path, func(w io.Writer) error { return encodeIndex(w, arrays) }); err != nil {
		return nil, path, false, fmt.Errorf("data: index cache: %w", err)
	}
	return arrays, path, false, nil
}

// wait polls for path until it can be read or ctx ends.
func (c IndexCache) wait(ctx context.Context, path string) ([][]int64, error) {
	poll := c.Poll
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("data: waiting for index cache %s built by another rank: %w", path, context.Cause(ctx))
		case <-t.C:
		}
		arrays, err := readIndexFile(path)
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			return arrays, err
		}
	}
}

// encodeIndex writes the cache format: magic, u64 K, u64 lengths[K], the arrays as
// little-endian int64, then the CRC-32 (IEEE) of all preceding bytes as u32.
func encodeIndex(w io.Writer, arrays [][]int64) error {
	crc := crc32.NewIEEE()
	var buf [8]byte
	put := func(v uint64) error {
		binary.LittleEndian.PutUint64(buf[:], v)
		crc.Write(buf[:])
		_, err := w.Write(buf[:])
		return err
	}
	crc.Write([]byte(cacheMagic))
	if _, err := io.WriteString(w, cacheMagic); err != nil {
		return err
	}
	if err := put(uint64(len(arrays))); err != nil {
		return err
	}
	for _, a := range arrays {
		if err := put(uint64(len(a))); err != nil {
			return err
		}
	}
	for _, a := range arrays {
		for _, v := range a {
			if err := put(uint64(v)); err != nil {
				return err
			}
		}
	}
	binary.LittleEndian.PutUint32(buf[:4], crc.Sum32())
	_, err := w.Write(buf[:4])
	return err
}

// readIndexFile reads a file written by encodeIndex. A missing file gives an error
// that matches fs.ErrNotExist; any other problem names the file.
func readIndexFile(path string) ([][]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	bad := func(why string) error {
		return fmt.Errorf("data: index cache %s: %s (delete it to rebuild)", path, why)
	}
	if len(b) < len(cacheMagic)+8+4 || string(b[:len(cacheMagic)]) != cacheMagic {
		return nil, bad("not a megago index file")
	}
	body, tail := b[:len(b)-4], b[len(b)-4:]
	if crc32.ChecksumIEEE(body) != binary.LittleEndian.Uint32(tail) {
		return nil, bad("checksum mismatch")
	}
	p := body[len(cacheMagic):]
	k := binary.LittleEndian.Uint64(p)
	p = p[8:]
	if k > uint64(len(p)/8) {
		return nil, bad("bad array count")
	}
	lens := make([]uint64, k)
	total := uint64(0)
	for i := range lens {
		lens[i] = binary.LittleEndian.Uint64(p[8*i:])
		total += lens[i]
		if lens[i] > uint64(len(p)) || total > uint64(len(p)) {
			return nil, bad("bad array length")
		}
	}
	p = p[8*k:]
	if uint64(len(p)) != 8*total {
		return nil, bad("size does not match the array lengths")
	}
	arrays := make([][]int64, k)
	for i, n := range lens {
		a := make([]int64, n)
		for j := range a {
			a[j] = int64(binary.LittleEndian.Uint64(p[8*j:]))
		}
		p = p[8*n:]
		arrays[i] = a
	}
	return arrays, nil
}
