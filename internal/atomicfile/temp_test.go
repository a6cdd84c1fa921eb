package atomicfile_test

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/internal/atomicfile"
	"megago/internal/filelock"
)

// RemoveStale deletes the temporary files of dead writers (unlocked), never one being
// written (locked) nor a file of another name.
func TestRemoveStaleKeepsLiveFiles(t *testing.T) {
	if !filelock.Supported {
		t.Skip("needs flock (a Unix system)")
	}
	dir := t.TempDir()
	live, err := atomicfile.CreateTemp(dir, "a.bin.")
	require.NoError(t, err)
	defer live.Close()
	dead := filepath.Join(dir, "a.bin.0123abcd.tmp") // what a killed writer leaves
	keep := []string{"a.bin", "a.bin.notatemp.tmp", "b.bin.0123abcd.tmp", "a.bin.0123abcd.tmpx"}
	for _, name := range append(keep, filepath.Base(dead)) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), nil, 0o644))
	}
	removed, err := atomicfile.RemoveStale(dir, "a.bin.")
	require.NoError(t, err)
	require.Equal(t, []string{dead}, removed)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := append(slices.Clone(keep), filepath.Base(live.Name()))
	slices.Sort(want)
	require.Equal(t, want, names)
}

func TestCreateTempIs0644UnderTheUmask(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	f, err := atomicfile.CreateTemp(t.TempDir(), "x.")
	require.NoError(t, err)
	defer f.Close()
	fi, err := f.Stat()
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o644), fi.Mode().Perm())
}
