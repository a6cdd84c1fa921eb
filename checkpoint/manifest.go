package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"megago/internal/ckptlayout"
	"megago/parallel"
)

// Names in a checkpoint directory.
const (
	// TrackerFile holds the number of the latest complete checkpoint, as in Megatron.
	TrackerFile = ckptlayout.TrackerFile
	// ManifestFile is written last into each iteration's directory.
	ManifestFile = "manifest.json"

	manifestFormat = "megago-checkpoint"
	// FormatVersion is the version of the layout this package writes. Version 2 added
	// the manifest's own checksum (Manifest.Checksum); manifests of version 1, which have
	// none, are still read.
	FormatVersion = 2
)

// File kinds.
const (
	KindModel     = "model"     // model parameters of one (TP, PP) rank (and expert ones of an expert-DP rank 0)
	KindOptimizer = "optimizer" // optimizer state of one (TP, PP, DP) rank
)

// IterDir returns the name of iteration it's directory: iter_0000100 for 100.
func IterDir(it int) string { return ckptlayout.IterDir(it) }

// modelFile and optimFile name the shard files of a rank.
func modelFile(tp, pp int) string { return fmt.Sprintf("model_tp%02d_pp%03d.safetensors", tp, pp) }
func optimFile(tp, pp, dp int) string {
	return fmt.Sprintf("optim_tp%02d_pp%03d_dp%03d.safetensors", tp, pp, dp)
}

// replica returns the place of the rank at c among the ranks of mesh sizes s that hold
// the same dense parameters: its rank in the DP × CP group (context-parallel ranks hold
// the same parameters as data-parallel ones; CP is the faster axis). With CP = 1 it is
// the DP coordinate.
func replica(s parallel.Sizes, c parallel.Coord) int { return c.DP*s.CP + c.CP }

// fileCoord returns the coordinates that name the files of the rank at c: DP stands
// for the rank's replica, so the files are named as at CP = 1 with DP × CP
// data-parallel ranks.
func fileCoord(s parallel.Sizes, c parallel.Coord) parallel.Coord {
	return parallel.Coord{TP: c.TP, DP: replica(s, c), PP: c.PP}
}

// rankModelFile names the model file of the rank at c (fileCoord): modelFile for DP
// rank 0, which writes the dense parameters; a rank of another DP coordinate writes one
// only when it is expert-DP rank 0 of expert parameters, named with its DP coordinate
// too.
func rankModelFile(c parallel.Coord) string {
	if c.DP == 0 {
		return modelFile(c.TP, c.PP)
	}
	return fmt.Sprintf("model_tp%02d_pp%03d_dp%03d.safetensors", c.TP, c.PP, c.DP)
}

var shardFileName = regexp.MustCompile(`^(model_tp\d{2,}_pp\d{3,}(_dp\d{3,})?|optim_tp\d{2,}_pp\d{3,}_dp\d{3,})\.safetensors$`)

// Manifest describes one saved iteration: what was saved, by which layout, and a
// checksum of every file. It is written last, after every rank's files are on disk.
type Manifest struct {
	// Checksum is the SHA-256, in hex, of the manifest file as written with this value
	// replaced by 64 zeros; it is the first field of the file. The writer sets it, and
	// ReadManifest refuses a manifest of version 2 or later whose contents do not match
	// it (the manifest is the one file no other checksum covers).
	Checksum      string `json:"manifest_sha256,omitempty"`
	Format        string `json:"format"`
	FormatVersion int    `json:"format_version"`
	// Version is the megago version that wrote the checkpoint.
	Version   string `json:"megago_version"`
	Iteration int    `json:"iteration"`
	// ConsumedSamples is the data position: samples consumed by all DP ranks together
	// (data.PretrainingSampler.Consumed when resuming).
	ConsumedSamples int `json:"consumed_samples"`
	// Seed is the run's random seed. megago's generators are counter-based and keyed by
	// the seed and global coordinates (step, sample, element), so the seed with
	// Iteration and ConsumedSamples is the whole random state.
	Seed   uint64 `json:"seed"`
	Model  Model  `json:"model"`
	Layout Layout `json:"layout"`
	// Optimizer holds the optimizer's scalars (step count, loss scaler, learning-rate
	// schedule; see optim.State), or is nil for a weights-only checkpoint.
	Optimizer map[string]float64 `json:"optimizer,omitempty"`
	// Files lists every shard file with its kind, size and SHA-256.
	Files map[string]FileInfo `json:"files"`
	// Extra holds the caller's own values (State.Extra).
	Extra map[string]string `json:"extra,omitempty"`
}

// Layout is the parallel layout a checkpoint was saved at.
type Layout struct {
	TP int `json:"tp"`
	PP int `json:"pp"`
	DP int `json:"dp"`
	// CP is the context-parallel size, recorded only when it is not 1 (older manifests
	// have none). CP ranks hold the same parameters as DP ranks do: the files are
	// named as at DP × CP data-parallel ranks (fileCoord), and a checkpoint loads at any
	// CP.
	CP int `json:"cp,omitempty"`
	// DistributedOptimizer is set when the optimizer state was sharded over DP (DP ×
	// CP).
	DistributedOptimizer bool `json:"distributed_optimizer"`
	// EP and ETP are the experts' expert-parallel and expert-TP sizes, recorded only
	// when they are not 1 and TP (older manifests and dense models have none).
	EP  int `json:"ep,omitempty"`
	ETP int `json:"etp,omitempty"`
}

// layoutOf returns the Layout of a mesh of sizes s (resolved).
func layoutOf(s parallel.Sizes) Layout {
	l := Layout{TP: s.TP, PP: s.PP, DP: s.DP}
	if s.CP > 1 {
		l.CP = s.CP
	}
	if s.EP > 1 || s.ETP != s.TP {
		l.EP, l.ETP = s.EP, s.ETP
	}
	return l
}

// String returns the layout as "TP 2 × PP 1 × DP 2" ("TP 2 × CP 2 × PP 1 × DP 2" under
// context parallelism), with the experts' sizes if recorded ("TP 1 × PP 1 × DP 2, experts EP 2 × expert-TP 1").
func (l Layout) String() string {
	s := fmt.Sprintf("TP %d × PP %d × DP %d", l.TP, l.PP, l.DP)
	if l.CP > 1 {
		s = fmt.Sprintf("TP %d × CP %d × PP %d × DP %d", l.TP, l.CP, l.PP, l.DP)
	}
	if l.EP > 0 {
		s += fmt.Sprintf(", experts EP %d × expert-TP %d", l.EP, l.ETP)
	}
	return s
}

// FileInfo describes one shard file.
type FileInfo struct {
	Kind   string `json:"kind"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// validate checks a manifest read from disk.
func (m *Manifest) validate() error {
	switch {
	case m.Format != manifestFormat:
		return fmt.Errorf("format %q is not %q", m.Format, manifestFormat)
	case m.FormatVersion < 1 || m.FormatVersion > FormatVersion:
		return fmt.Errorf("format version %d: this megago reads version %d", m.FormatVersion, FormatVersion)
	case m.Iteration < 0 || m.ConsumedSamples < 0:
		return fmt.Errorf("iteration %d, consumed samples %d", m.Iteration, m.ConsumedSamples)
	case m.Layout.TP < 1 || m.Layout.PP < 1 || m.Layout.DP < 1 || m.Layout.CP < 0:
		return fmt.Errorf("layout %+v", m.Layout)
	case len(m.Files) == 0:
		return errors.New("no files")
	}
	if _, _, _, err := m.Model.vocab(); err != nil {
		return err
	}
	for name, f := range m.Files {
		sum, err := hex.DecodeString(f.SHA256)
		switch {
		case !shardFileName.MatchString(name):
			return fmt.Errorf("file name %q", name)
		case f.Kind != KindModel && f.Kind != KindOptimizer, strings.HasPrefix(name, "model") != (f.Kind == KindModel):
			return fmt.Errorf("file %s of kind %q", name, f.Kind)
		case err != nil || len(sum) != 32:
			return fmt.Errorf("file %s: checksum %q is not a SHA-256", name, f.SHA256)
		case f.Size < 8:
			return fmt.Errorf("file %s: size %d", name, f.Size)
		}
	}
	return nil
}

// ReadManifest reads and validates the manifest of the iteration directory dir.
func ReadManifest(dir string) (*Manifest, error) {
	path := filepath.Join(dir, ManifestFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint: %s has no %s: not a complete megago checkpoint", dir, ManifestFile)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	if m.FormatVersion >= 2 {
		if err := verifyChecksum(b, m.Checksum); err != nil {
			return nil, fmt.Errorf("checkpoint: %s: %w", path, err)
		}
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: invalid manifest: %w", path, err)
	}
	return &m, nil
}

// checksumPrefix is how an encoded manifest starts: its checksum is its first field.
const checksumPrefix = "{\n  \"manifest_sha256\": \""

// zeroChecksum stands for the checksum while it is computed: 64 hex zeros.
const zeroChecksum = "0000000000000000000000000000000000000000000000000000000000000000"

// encode returns the manifest as indented JSON, setting m.Checksum to the SHA-256 of
// the result with the checksum's value zeroed.
func (m *Manifest) encode() []byte {
	m.Checksum = zeroChecksum
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		panic(fmt.Sprintf("checkpoint: encoding the manifest: %v", err))
	}
	b := buf.Bytes()
	if !bytes.HasPrefix(b, []byte(checksumPrefix+zeroChecksum)) {
		panic("checkpoint: encoding the manifest: the checksum is not its first field")
	}
	sum := sha256.Sum256(b)
	m.Checksum = hex.EncodeToString(sum[:])
	copy(b[len(checksumPrefix):], m.Checksum)
	return b
}

// verifyChecksum checks a manifest file b against the checksum it records (see
// Manifest.Checksum).
func verifyChecksum(b []byte, recorded string) error {
	n := len(checksumPrefix)
	if !bytes.HasPrefix(b, []byte(checksumPrefix)) || len(b) < n+len(zeroChecksum) || string(b[n:n+len(zeroChecksum)]) != recorded {
		return fmt.Errorf("the manifest (format version 2 or later) does not start with its checksum: it was edited or is corrupt")
	}
	zeroed := bytes.Clone(b)
	copy(zeroed[n:], zeroChecksum)
	if sum := sha256.Sum256(zeroed); hex.EncodeToString(sum[:]) != recorded {
		return fmt.Errorf("manifest checksum mismatch (its contents have SHA-256 %x, it records %s): it was edited or is corrupt", sum, recorded)
	}
	return nil
}

// LatestIteration returns the iteration recorded in dir's tracker file.
func LatestIteration(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, TrackerFile))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("checkpoint: no checkpoint in %s (%s missing)", dir, TrackerFile)
	}
	if err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	it, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || it < 0 {
		return 0, fmt.Errorf("checkpoint: %s in %s holds %q, not an iteration number", TrackerFile, dir, bytes.TrimSpace(b))
	}
	return it, nil
}

// iterationDir returns the directory of iteration it of dir (the latest if it < 0).
// A directory moved aside while a save replaced it (see publish) is used if the new
// one is missing.
func iterationDir(dir string, it int) (string, int, error) {
	if it < 0 {
		var err error
		if it, err = LatestIteration(dir); err != nil {
			return "", 0, err
		}
	}
	d := filepath.Join(dir, IterDir(it))
	if _, err := os.Stat(d); err != nil {
		if _, err2 := os.Stat(d + oldSuffix); err2 == nil {
			return d + oldSuffix, it, nil
		}
		return "", 0, fmt.Errorf("checkpoint: iteration %d: %w", it, err)
	}
	return d, it, nil
}

// sortedKeys returns m's keys in increasing order.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
