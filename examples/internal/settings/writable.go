package settings

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// CheckWritable makes sure the directories a run writes to can be written, before any
// work rather than at the first save: --save on every process (each rank writes its
// shards); --out-dir and --tensorboard-dir only where reports is set (the process of
// world rank 0, which writes them). It leaves nothing behind (see probe). The error
// names the flag and the directory.
func (c *Common) CheckWritable(reports bool) error {
	dirs := [][2]string{{"--save", c.Save}}
	if reports {
		dirs = append(dirs, [2]string{"--out-dir", c.OutDir}, [2]string{"--tensorboard-dir", c.TensorboardDir})
	}
	for _, d := range dirs {
		if d[1] == "" {
			continue
		}
		if err := probe(d[1]); err != nil {
			return fmt.Errorf("%s %s cannot be written: %w", d[0], d[1], err)
		}
	}
	return nil
}

// probe checks that dir can be written, or created: an existing dir must be a directory
// in which a file can be created, written and removed; for a missing one, its first
// missing ancestor (or itself) is created and removed again. Another process probing
// the same path at once is no error.
func probe(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		if err := os.MkdirAll(dir, 0o755); err != nil { // not a directory
			return err
		}
		f, err := os.CreateTemp(dir, ".megago-write-probe-*")
		if err != nil {
			return err
		}
		_, werr := f.WriteString("megago checks that this directory can be written\n")
		cerr := f.Close()
		return cmp.Or(werr, cerr, os.Remove(f.Name()))
	}
	first := filepath.Clean(dir)
	for {
		parent := filepath.Dir(first)
		if _, err := os.Stat(parent); err == nil || parent == first {
			break
		}
		first = parent
	}
	switch err := os.Mkdir(first, 0o755); {
	case errors.Is(err, fs.ErrExist):
		return nil // made meanwhile
	case err != nil:
		return err
	}
	if err := os.Remove(first); err != nil && !errors.Is(err, fs.ErrExist) && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
