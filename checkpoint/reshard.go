package checkpoint

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"megago/tensor"
)

// Resharding. Every stored tensor is a piece of a named global tensor: a Region of it (a
// parameter's TP shard, Param.Region) and a range [Flat[0], Flat[1]) of that region's
// row-major flattening (all of it, or a distributed-optimizer shard: Megatron's
// flattened_range). A piece covers a set of runs of the global tensor's own row-major
// flattening; a target piece at any other layout is filled by intersecting its runs with
// the stored ones.

// run is a stretch of n consecutive elements of a global tensor's row-major
// flattening, starting at global index g, that is held at element l of a piece.
type run struct{ g, l, n int }

// runs returns the runs of the piece holding elements [flat[0], flat[1]) of region r's
// flattening, in increasing order of g.
func runs(r tensor.Region, flat [2]int) []run {
	k := len(r.Full)
	if flat[0] >= flat[1] {
		return nil
	}
	// d is the outermost dim after which the region spans whole dims: a block of
	// Size[d]·inner elements is contiguous in the global tensor.
	d := k - 1
	for d >= 0 && r.Size[d] == r.Full[d] {
		d--
	}
	if d < 0 {
		return []run{{g: flat[0], l: 0, n: flat[1] - flat[0]}}
	}
	strides := r.Full.Strides()
	block := r.Size[d] * strides[d]
	var out []run
	for b := flat[0] / block; b*block < flat[1]; b++ {
		// Global offset of block b: its index over dims [0, d) of Size, plus Start.
		g, rest := r.Start[d]*strides[d], b
		for j := d - 1; j >= 0; j-- {
			g += (r.Start[j] + rest%r.Size[j]) * strides[j]
			rest /= r.Size[j]
		}
		lo, hi := max(flat[0], b*block), min(flat[1], (b+1)*block)
		out = append(out, run{g: g + lo - b*block, l: lo - flat[0], n: hi - lo})
	}
	return out
}

// piece is one stored part of a named global tensor.
type piece struct {
	region tensor.Region
	flat   [2]int
	dtype  tensor.DType
	data   func() ([]byte, error) // the piece's bytes, flat[1]−flat[0] elements
	file   *shardFile             // the file data reads, if any
}

// source is a set of pieces, by tensor name: the shard files of a checkpoint, or global
// tensors held in memory.
type source struct {
	pieces map[string][]*piece
	index  map[string][]srcRun // built on first use
	files  []*shardFile        // to close
}

// fetch maps and verifies, in parallel, every file marked as needed by segments.
func (s *source) fetch() error {
	errs := make([]error, len(s.files))
	var wg sync.WaitGroup
	for i, f := range s.files {
		if f.needed.Load() {
			wg.Go(func() { _, errs[i] = f.bytes() })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// close releases the source's files; its pieces' bytes must not be used afterwards.
func (s *source) close() {
	for _, f := range s.files {
		f.close()
	}
}

// srcRun is a run of a piece.
type srcRun struct {
	run
	p *piece
}

func newSource() *source {
	return &source{pieces: map[string][]*piece{}, index: map[string][]srcRun{}}
}

// add adds a piece of name, checking it against the pieces already there.
func (s *source) add(name string, p *piece) error {
	if err := checkPiece(p.region, p.flat); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if ps := s.pieces[name]; len(ps) > 0 {
		if !ps[0].region.Full.Equal(p.region.Full) || ps[0].dtype != p.dtype {
			return fmt.Errorf("%s: a piece of %v %v beside pieces of %v %v", name, p.dtype, p.region.Full, ps[0].dtype, ps[0].region.Full)
		}
	}
	s.pieces[name] = append(s.pieces[name], p)
	delete(s.index, name)
	return nil
}

// checkPiece checks a region and flat range read from a file.
func checkPiece(r tensor.Region, flat [2]int) error {
	if len(r.Start) != len(r.Full) || len(r.Size) != len(r.Full) {
		return fmt.Errorf("region %+v: ranks differ", r)
	}
	n := 1
	for i := range r.Full {
		if r.Full[i] < 0 || r.Start[i] < 0 || r.Size[i] < 0 || r.Start[i] > r.Full[i]-r.Size[i] {
			return fmt.Errorf("region start %v size %v outside %v", r.Start, r.Size, r.Full)
		}
		if r.Full[i] > 0 && n > (1<<48)/r.Full[i] {
			return fmt.Errorf("global shape %v too large", r.Full)
		}
		n *= r.Full[i]
	}
	if flat[0] < 0 || flat[0] > flat[1] || flat[1] > r.Size.Numel() {
		return fmt.Errorf("flat range [%d, %d) outside a region of %d elements", flat[0], flat[1], r.Size.Numel())
	}
	return nil
}

// runsOf returns the sorted runs of name's pieces, or an error if two pieces overlap.
func (s *source) runsOf(name string) ([]srcRun, error) {
	if idx, ok := s.index[name]; ok {
		return idx, nil
	}
	var idx []srcRun
	for _, p := range s.pieces[name] {
		for _, r := range runs(p.region, p.flat) {
			idx = append(idx, srcRun{r, p})
		}
	}
	sort.Slice(idx, func(i, j int) bool { return idx[i].g < idx[j].g })
	for i := 1; i < len(idx); i++ {
		if idx[i].g < idx[i-1].g+idx[i-1].n {
			return nil, fmt.Errorf("%s: stored pieces overlap at element %d", name, idx[i].g)
		}
	}
	s.index[name] = idx
	return idx, nil
}

// want describes a piece to fill.
type want struct {
	name   string
	region tensor.Region
	flat   [2]int
	// vocab, if positive, lets dim 0 of the global shape differ between the stored
	// tensor and the target when both have at least vocab rows (another vocabulary
	// padding): the rows both have are copied (padding rows too: they are parameters
	// like any other, if dead ones), the target's further rows are zero.
	vocab int
}

// segments calls fn, in increasing order of off, for every stretch of the target piece
// w held by the source: the stored bytes of n = len(b)/dtype-size elements that go to
// element off of the piece. Elements of w that no piece holds are an error, except
// vocabulary padding rows (see want.vocab), which fn never sees. fn may be nil: the
// files holding the bytes are then only marked as needed (see fetch). It returns the
// stored dtype.
func (s *source) segments(w want, fn func(off int, b []byte) error) (tensor.DType, error) {
	ps := s.pieces[w.name]
	if len(ps) == 0 {
		return 0, fmt.Errorf("%s is not in the checkpoint", w.name)
	}
	full := ps[0].region.Full
	limit := w.region.Full.Numel() // target global elements that come from the source
	if !full.Equal(w.region.Full) {
		rowsOK := w.vocab > 0 && len(full) > 0 && len(full) == len(w.region.Full) && full[1:].Equal(w.region.Full[1:]) &&
			full[0] >= w.vocab && w.region.Full[0] >= w.vocab
		if !rowsOK {
			return 0, fmt.Errorf("%s has global shape %v in the checkpoint, %v in the model", w.name, full, w.region.Full)
		}
		limit = min(full[0], w.region.Full[0]) * full[1:].Numel() // the same row length on both sides
	}
	idx, err := s.runsOf(w.name)
	if err != nil {
		return 0, err
	}
	dt := ps[0].dtype
	es := dt.Size()
	need, got := 0, 0
	for _, tr := range runs(w.region, w.flat) {
		n := min(tr.n, limit-tr.g)
		if n <= 0 {
			continue // vocabulary padding rows
		}
		need += n
		i := sort.Search(len(idx), func(i int) bool { return idx[i].g+idx[i].n > tr.g })
		for ; i < len(idx) && idx[i].g < tr.g+n; i++ {
			sr := idx[i]
			lo, hi := max(sr.g, tr.g), min(sr.g+sr.n, tr.g+n)
			got += hi - lo
			if fn == nil {
				if sr.p.file != nil {
					sr.p.file.needed.Store(true)
				}
				continue
			}
			data, err := sr.p.data()
			if err != nil {
				return 0, err
			}
			if err := fn(tr.l+lo-tr.g, data[(sr.l+lo-sr.g)*es:(sr.l+hi-sr.g)*es]); err != nil {
				return 0, err
			}
		}
	}
	if got != need {
		return 0, fmt.Errorf("%s: %d of the %d elements this rank needs are in no shard file (a shard is missing)", w.name, need-got, need)
	}
	return dt, nil
}

// assemble returns the bytes of the target piece w, in the stored dtype (vocabulary
// padding rows zero). It checks that the stored pieces cover w before allocating it, so
// a global shape that a file's metadata inflates is refused, not allocated.
func (s *source) assemble(w want) (tensor.DType, []byte, error) {
	if _, err := s.segments(w, nil); err != nil {
		return 0, nil, err
	}
	var out []byte
	dt, err := s.segments(w, func(off int, b []byte) error {
		if out == nil {
			out = make([]byte, (w.flat[1]-w.flat[0])*s.pieces[w.name][0].dtype.Size())
		}
		copy(out[off*s.pieces[w.name][0].dtype.Size():], b)
		return nil
	})
	if err == nil && out == nil {
		out = make([]byte, (w.flat[1]-w.flat[0])*dt.Size())
	}
	return dt, out, err
}

// writeInto writes the target piece w into t, a tensor of its flat[1] − flat[0]
// elements (any shape and dtype; elements of vocabulary padding rows are set to zero),
// straight from the stored bytes when the dtypes agree.
func (s *source) writeInto(w want, t *tensor.Tensor) error {
	flat := t.Detach().Reshape(t.Numel())
	be := t.Device().Backend()
	if w.vocab > 0 {
		be.Fill(flat.Span(), 0) // padding rows the source may not hold
	}
	_, err := s.segments(w, func(off int, b []byte) error {
		dt := s.pieces[w.name][0].dtype
		n := len(b) / dt.Size()
		dst := flat.Narrow(0, off, n)
		if dt == t.DType() {
			be.WriteHost(dst.Span(), b)
			return nil
		}
		tmp := fromBytes(t.Device(), dt, tensor.Shape{n}, b)
		dst.CopyFrom(tmp)
		tmp.Release()
		return nil
	})
	return err
}

// names returns the source's tensor names, sorted.
func (s *source) names() []string {
	out := make([]string, 0, len(s.pieces))
	for n := range s.pieces {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// global assembles the whole of tensor name at its stored global shape.
func (s *source) global(name string) (tensor.DType, tensor.Shape, []byte, error) {
	ps := s.pieces[name]
	if len(ps) == 0 {
		return 0, nil, nil, fmt.Errorf("%s is not in the checkpoint", name)
	}
	full := ps[0].region.Full
	dt, b, err := s.assemble(want{name: name, region: tensor.Whole(full...), flat: [2]int{0, full.Numel()}})
	return dt, full.Clone(), b, err
}

// memSource returns a source holding global tensors whole.
func memSource(global map[string]*tensor.Tensor) *source {
	s := newSource()
	for name, t := range global {
		b := tensorBytes(t)
		// add cannot fail: a whole region with its full flat range is always valid.
		_ = s.add(name, &piece{region: tensor.Whole(t.Shape()...), flat: [2]int{0, t.Numel()}, dtype: t.DType(),
			data: func() ([]byte, error) { return b, nil }})
	}
	return s
}

// tensorBytes returns a copy of t's elements as raw little-endian bytes.
func tensorBytes(t *tensor.Tensor) []byte {
	b := make([]byte, t.Numel()*t.DType().Size())
	t.Device().Backend().ReadHost(t.Span(), b)
	return b
}

// fromBytes returns a tensor of dtype dt and shape on dev holding the raw bytes b.
func fromBytes(dev *tensor.Device, dt tensor.DType, shape tensor.Shape, b []byte) *tensor.Tensor {
	t := tensor.Empty(dev, dt, shape...)
	dev.Backend().WriteHost(t.Span(), b)
	return t
}
