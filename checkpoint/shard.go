package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/edsrzf/mmap-go"

	megago "megago"
	"megago/tensor"
)

// Shard files are safetensors files whose metadata records, for every tensor, the
// piece of the global tensor it holds: "piece.<name>" maps to the JSON of a pieceMeta.

const (
	metaFormat   = "format"
	metaVersion  = "megago_version"
	metaPrefix   = "piece."
	formatMegago = "megago"
)

// pieceMeta is a tensor's place in its global tensor.
type pieceMeta struct {
	Full  []int  `json:"full"`
	Start []int  `json:"start"`
	Size  []int  `json:"size"`
	Flat  [2]int `json:"flat"`
}

func (m pieceMeta) region() tensor.Region {
	return tensor.Region{Full: m.Full, Start: m.Start, Size: m.Size}
}

// shardMeta returns the metadata of a shard file holding ps.
func shardMeta(ps []outPiece) map[string]string {
	meta := map[string]string{metaFormat: formatMegago, metaVersion: megago.Version}
	for _, p := range ps {
		m := pieceMeta{Full: p.region.Full, Start: p.region.Start, Size: p.region.Size, Flat: p.flat}
		meta[metaPrefix+p.name] = string(mustJSON(m))
	}
	return meta
}

// shardFile is a shard file of a checkpoint being read: its header is read when it is
// opened, its bytes (checked against the manifest's checksum) when a piece is first
// needed.
type shardFile struct {
	path   string
	info   FileInfo
	verify bool
	hdr    *Header

	needed atomic.Bool // set by source.segments
	once   sync.Once
	m      mmap.MMap // the file, mapped read-only
	err    error
}

// openShard opens the shard file name of the iteration directory dir and reads its
// header.
func openShard(dir, name string, info FileInfo, verify bool) (*shardFile, error) {
	path := filepath.Join(dir, name)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("shard file %s listed in the manifest is missing", path)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() != info.Size {
		return nil, fmt.Errorf("shard file %s has %d bytes, the manifest says %d (truncated or replaced?)", path, st.Size(), info.Size)
	}
	hdr, err := ReadHeader(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("shard file %s: %w", path, err)
	}
	if hdr.Metadata[metaFormat] != formatMegago {
		return nil, fmt.Errorf("shard file %s: not a megago shard (metadata format %q)", path, hdr.Metadata[metaFormat])
	}
	return &shardFile{path: path, info: info, verify: verify, hdr: hdr}, nil
}

// bytes returns the whole file, mapped into memory once and checked against the
// manifest's checksum.
func (f *shardFile) bytes() ([]byte, error) {
	f.once.Do(func() {
		f.err = f.mapFile()
		if f.err == nil && f.verify {
			if sum := sha256.Sum256(f.m); hex.EncodeToString(sum[:]) != f.info.SHA256 {
				f.err = fmt.Errorf("shard file %s: checksum mismatch (SHA-256 %x, the manifest says %s): the file is corrupt",
					f.path, sum, f.info.SHA256)
			}
		}
	})
	return f.m, f.err
}

// mapFile maps the file, checking its size again.
func (f *shardFile) mapFile() error {
	file, err := os.Open(f.path)
	if err != nil {
		return err
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return err
	}
	if st.Size() != f.info.Size {
		return fmt.Errorf("shard file %s has %d bytes, the manifest says %d", f.path, st.Size(), f.info.Size)
	}
	f.m, err = mmap.Map(file, mmap.RDONLY, 0)
	if err != nil {
		return fmt.Errorf("shard file %s: %w", f.path, err)
	}
	return nil
}

// close unmaps the file.
func (f *shardFile) close() {
	if f.m != nil {
		_ = f.m.Unmap()
		f.m = nil
	}
}

// addTo adds the file's pieces to s.
func (f *shardFile) addTo(s *source) error {
	for _, t := range f.hdr.Tensors {
		js, ok := f.hdr.Metadata[metaPrefix+t.Name]
		if !ok {
			return fmt.Errorf("shard file %s: tensor %s has no piece metadata", f.path, t.Name)
		}
		var m pieceMeta
		if err := json.Unmarshal([]byte(js), &m); err != nil {
			return fmt.Errorf("shard file %s: piece metadata of %s: %w", f.path, t.Name, err)
		}
		p := &piece{region: m.region(), flat: m.Flat, dtype: t.DType, file: f}
		if err := checkPiece(p.region, p.flat); err != nil {
			return fmt.Errorf("shard file %s: %s: %w", f.path, t.Name, err)
		}
		if t.Shape.Numel() != m.Flat[1]-m.Flat[0] {
			return fmt.Errorf("shard file %s: %s holds %v, not the %d elements of its piece", f.path, t.Name, t.Shape, m.Flat[1]-m.Flat[0])
		}
		begin, end := f.hdr.DataStart+t.Begin, f.hdr.DataStart+t.End
		p.data = func() ([]byte, error) {
			b, err := f.bytes()
			if err != nil {
				return nil, err
			}
			return b[begin:end], nil
		}
		if err := s.add(t.Name, p); err != nil {
			return fmt.Errorf("shard file %s: %w", f.path, err)
		}
	}
	return nil
}

// openSource opens the shard files of kind listed in manifest m of the iteration
// directory dir and indexes their pieces.
func openSource(dir string, m *Manifest, kind string, verify bool) (*source, error) {
	s := newSource()
	for _, name := range sortedKeys(m.Files) {
		info := m.Files[name]
		if info.Kind != kind {
			continue
		}
		f, err := openShard(dir, name, info, verify)
		if err != nil {
			s.close()
			return nil, err
		}
		s.files = append(s.files, f)
		if err := f.addTo(s); err != nil {
			s.close()
			return nil, err
		}
	}
	return s, nil
}

// optimKind returns the kind of an optimizer state name ("exp_avg" of
// "optimizer.state.exp_avg.layers.0.attn.qkv.weight") and its parameter's name.
func optimKind(name string) (kind, param string, ok bool) {
	rest, ok := strings.CutPrefix(name, optimPrefix)
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, ".")
}

const optimPrefix = "optimizer.state."
