package checkpoint

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	"megago/internal/atomicfile"
	"megago/internal/filelock"
	"megago/parallel"
	"megago/tensor"
)

// Crash safety. Rank 0 locks <dir>/.megago-save.lock for the whole save, so two jobs
// never save into one directory at once, and removes what interrupted saves left (their
// staging directories and temporary files): with the lock held, no save is under way.
// Files are written into <dir>/iter_NNNNNNN.staging under temporary names, fsynced and
// renamed; after every rank has reported its files (an all-gather), rank 0 writes the
// manifest the same way, fsyncs the staging directory, renames it to iter_NNNNNNN
// (moving an existing one aside to iter_NNNNNNN.old first), fsyncs dir, and finally
// replaces the tracker file through a fsynced temporary file and a rename. Whatever
// happens before that last rename, the tracker names the previous checkpoint. A save
// that fails removes its staging directory; one whose process dies leaves it to the next.

const (
	stagingSuffix = ".staging"
	oldSuffix     = ".old"
	// LockFile is the lock file of a checkpoint directory: rank 0 of a saving job holds
	// its flock (package filelock) for the duration of each save and writes its process
	// id into it. The kernel releases the lock when the holder dies.
	LockFile = ".megago-save.lock"
)

// stagingName matches the staging directories of saves.
var stagingName = regexp.MustCompile(`^iter_\d{7,}\.staging$`)

// saveHook, if not nil, is called at named points of a save (tests crash there).
type saveHook func(rank int, point string)

func (h saveHook) at(rank int, point string) {
	if h != nil {
		h(rank, point)
	}
}

// PendingSave is a save whose files are being written (see StartSave).
type PendingSave struct {
	dir, staging string
	mesh         *parallel.Mesh
	dev          *tensor.Device // where the collectives' tensors live
	man          Manifest       // rank 0's fields from its State
	data         rankData
	hook         saveHook
	lock         *filelock.File // the directory's lock, held by rank 0 until the save ends

	done    chan struct{}
	files   [2]writtenFile // model, optimizer
	sharded bool           // data.sharded, kept after write frees data
	err     error          // this rank's write error
}

// writtenFile is a file a rank wrote: size < 0 when none.
type writtenFile struct {
	size int64
	sum  [32]byte
}

// begin prepares the staging directory and writes this rank's files.
func begin(ctx context.Context, dir string, mesh *parallel.Mesh, dev *tensor.Device, man Manifest, d rankData, async bool, hook saveHook) (_ *PendingSave, err error) {
	p := &PendingSave{dir: dir, staging: filepath.Join(dir, IterDir(man.Iteration)+stagingSuffix), mesh: mesh, dev: dev,
		man: man, data: d, sharded: d.sharded, hook: hook, done: make(chan struct{})}
	p.files[0].size, p.files[1].size = -1, -1
	world := mesh.World()
	var prepErr error
	if world.Rank() == 0 {
		p.lock, prepErr = prepareStaging(dir, p.staging)
	}
	defer p.end(&err, false) // on an error or a panic before the writes start
	ok, err := allOK(ctx, world, dev, prepErr == nil)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: saving iteration %d: %w", man.Iteration, err)
	}
	if !ok {
		if prepErr != nil {
			return nil, fmt.Errorf("checkpoint: saving iteration %d: %w", man.Iteration, prepErr)
		}
		return nil, fmt.Errorf("checkpoint: saving iteration %d: rank 0 could not prepare %s", man.Iteration, p.staging)
	}
	hook.at(world.Rank(), "staged")
	return p.started(async), nil
}

// started writes this rank's files, in the background if async. The directory's lock
// stays held until Commit.
func (p *PendingSave) started(async bool) *PendingSave {
	if !async {
		p.write()
		return p
	}
	for i := range p.data.model {
		p.data.model[i].snapshot()
	}
	for i := range p.data.optim {
		p.data.optim[i].snapshot()
	}
	go p.write()
	return p
}

// prepareStaging creates dir, takes its lock, removes what interrupted saves left and
// creates an empty staging directory. It returns the lock.
func prepareStaging(dir, staging string) (*filelock.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	lock, err := filelock.Acquire(filepath.Join(dir, LockFile))
	var held *filelock.HeldError
	if errors.As(err, &held) {
		return nil, fmt.Errorf("another save to %s is under way: %w", dir, err)
	}
	if err != nil {
		return nil, err
	}
	if err := removeStale(dir); err != nil {
		lock.Release()
		return nil, err
	}
	if err := os.Mkdir(staging, 0o755); err != nil {
		lock.Release()
		return nil, err
	}
	return lock, nil
}

// removeStale removes what interrupted saves left in dir: staging directories (a full
// disk stays full otherwise) and the tracker's temporary files. The caller holds the
// directory's lock, so no save is under way.
func removeStale(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() && stagingName.MatchString(e.Name()) {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("removing the staging directory of an interrupted save: %w", err)
			}
		}
	}
	_, err = atomicfile.RemoveStale(dir, atomicfile.TempPrefix(filepath.Join(dir, TrackerFile)))
	return err
}

// end ends rank 0's hold on the directory (it does nothing on other ranks): when the
// save failed (*err set, or a panic being recovered, which end raises again) it removes
// the staging directory and releases the lock; when committed is true (Commit
// returning) it releases the lock in any case.
func (p *PendingSave) end(err *error, committed bool) {
	r := recover()
	failed := r != nil || *err != nil
	if p.lock != nil && (failed || committed) {
		if failed {
			_ = os.RemoveAll(p.staging) // best effort: the next save removes what stays
		}
		p.lock.Release()
		p.lock = nil
	}
	if r != nil {
		panic(r)
	}
}

// allOK returns whether ok holds on every rank of c (a MIN all-reduce).
func allOK(ctx context.Context, c parallel.Comm, dev *tensor.Device, ok bool) (bool, error) {
	t := tensor.Scalar(dev, tensor.F64, flag(ok))
	defer t.Release()
	if err := c.AllReduce(ctx, t, parallel.Min); err != nil {
		return false, err
	}
	return t.Item() == 1, nil
}

func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// write writes this rank's files into the staging directory, the model's and the
// optimizer's concurrently.
func (p *PendingSave) write() {
	defer close(p.done)
	c := fileCoord(p.mesh.Sizes(), p.mesh.Coord())
	rank := p.mesh.World().Rank()
	mid := func() { p.hook.at(rank, "writing") }
	var errs [2]error
	var wg sync.WaitGroup
	for i, f := range []struct {
		write bool
		name  string
		ps    []outPiece
	}{{p.data.writeModel, rankModelFile(c), p.data.model}, {p.data.writeOptim, optimFile(c.TP, c.PP, c.DP), p.data.optim}} {
		if !f.write {
			continue
		}
		wg.Go(func() {
			defer func() { // a panic in a writer fails this save, not the process
				if r := recover(); r != nil {
					errs[i] = fmt.Errorf("checkpoint: writing %s: panic: %v", f.name, r)
				}
			}()
			p.files[i], errs[i] = writeShard(p.staging, f.name, f.ps, mid)
		})
	}
	wg.Wait()
	p.data = rankData{} // free the snapshot
	if p.err = errors.Join(errs[:]...); p.err == nil {
		p.hook.at(rank, "written")
	}
}

// writeShard writes pieces as the safetensors file name of dir, through a temporary
// file that is fsynced and renamed, and returns its size and SHA-256. mid is called
// after the first tensor's data.
func writeShard(dir, name string, ps []outPiece, mid func()) (writtenFile, error) {
	out := writtenFile{size: -1}
	tmp, final := filepath.Join(dir, "."+name+".tmp"), filepath.Join(dir, name)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return out, fmt.Errorf("checkpoint: %w", err)
	}
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	bw := bufio.NewWriterSize(cw, 1<<20)
	ts := make([]stTensor, len(ps))
	for i := range ps {
		ts[i] = ps[i].stTensor()
	}
	if len(ts) > 0 {
		w := ts[0].write
		ts[0].write = func(dst io.Writer) error {
			if err := w(dst); err != nil {
				return err
			}
			mid()
			return nil
		}
	}
	err = writeSafetensors(bw, ts, shardMeta(ps))
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		return out, fmt.Errorf("checkpoint: writing %s: %w", final, err)
	}
	out.size = cw.n
	copy(out.sum[:], h.Sum(nil))
	return out, nil
}

// contribution layout: flags (contribOK, contribSharded), then per file (model,
// optimizer) size and 4 words of SHA-256.
const contribWords = 1 + 2*5

// Flags of a contribution.
const (
	contribOK      = 1 // the rank wrote its files
	contribSharded = 2 // its optimizer state is split between data-parallel ranks
)

func (p *PendingSave) contribution() []int64 {
	v := make([]int64, contribWords)
	if p.err == nil {
		v[0] = contribOK
	}
	if p.sharded {
		v[0] |= contribSharded
	}
	for i, f := range p.files {
		v[1+5*i] = f.size
		for j := range 4 {
			v[2+5*i+j] = int64(binary.LittleEndian.Uint64(f.sum[8*j:]))
		}
	}
	return v
}

// Commit waits for this rank's files, gathers every rank's file sizes and checksums, and
// publishes the iteration (rank 0): manifest, directory rename, tracker. Every rank
// calls it and gets the same outcome: nil once the iteration is the latest, or an error
// (this rank's own failure, or which rank failed).
func (p *PendingSave) Commit(ctx context.Context) (err error) {
	defer p.end(&err, true)
	<-p.done
	world := p.mesh.World()
	it := p.man.Iteration
	mine := tensor.FromSlice(p.dev, p.contribution())
	all := tensor.Zeros(p.dev, tensor.I64, world.Size()*contribWords)
	defer mine.Release()
	defer all.Release()
	if err := world.AllGather(ctx, all, mine); err != nil {
		return fmt.Errorf("checkpoint: saving iteration %d: gathering checksums: %w", it, err)
	}
	var pubErr error
	if world.Rank() == 0 {
		pubErr = p.publish(tensor.ToSlice[int64](all))
	}
	ok := tensor.Scalar(p.dev, tensor.F64, flag(pubErr == nil && world.Rank() == 0))
	defer ok.Release()
	if err := world.Broadcast(ctx, ok, 0); err != nil {
		return fmt.Errorf("checkpoint: saving iteration %d: %w", it, err)
	}
	switch {
	case p.err != nil:
		return p.err
	case pubErr != nil:
		return pubErr
	case ok.Item() != 1:
		return fmt.Errorf("checkpoint: iteration %d was not saved: another rank failed (see its error)", it)
	}
	return nil
}

// publish builds the manifest from every rank's contribution and publishes the
// iteration (rank 0 only).
func (p *PendingSave) publish(all []int64) error {
	sizes := p.mesh.Sizes()
	m := p.man
	m.Layout = layoutOf(sizes)
	m.Files = map[string]FileInfo{}
	for r := range sizes.World() {
		v := all[r*contribWords : (r+1)*contribWords]
		if v[0]&contribOK == 0 {
			return fmt.Errorf("checkpoint: iteration %d was not saved: rank %d failed to write its files", m.Iteration, r)
		}
		m.Layout.DistributedOptimizer = m.Layout.DistributedOptimizer || v[0]&contribSharded != 0
		c := fileCoord(sizes, sizes.Coord(r))
		for i, name := range []string{rankModelFile(c), optimFile(c.TP, c.PP, c.DP)} {
			w := v[1+5*i : 1+5*(i+1)]
			if w[0] < 0 {
				continue
			}
			var sum [32]byte
			for j := range 4 {
				binary.LittleEndian.PutUint64(sum[8*j:], uint64(w[1+j]))
			}
			kind := KindModel
			if i == 1 {
				kind = KindOptimizer
			}
			m.Files[name] = FileInfo{Kind: kind, Size: w[0], SHA256: hex.EncodeToString(sum[:])}
		}
	}
	if err := publish(p.dir, p.staging, &m, func(point string) { p.hook.at(0, point) }); err != nil {
		return fmt.Errorf("checkpoint: publishing iteration %d: %w", m.Iteration, err)
	}
	return nil
}

// publish writes the manifest into staging, renames staging to the iteration's
// directory and points the tracker file at it.
func publish(dir, staging string, m *Manifest, hook func(string)) error {
	if err := atomicfile.WriteFile(filepath.Join(staging, ManifestFile), m.encode()); err != nil {
		return err
	}
	hook("manifest")
	final := filepath.Join(dir, IterDir(m.Iteration))
	old := final + oldSuffix
	if err := os.RemoveAll(old); err != nil {
		return err
	}
	if _, err := os.Stat(final); err == nil {
		if err := os.Rename(final, old); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Rename(staging, final); err != nil {
		return err
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return err
	}
	hook("renamed")
	if err := atomicfile.WriteFile(filepath.Join(dir, TrackerFile), fmt.Appendf(nil, "%d\n", m.Iteration)); err != nil {
		return err
	}
	return os.RemoveAll(old)
}
