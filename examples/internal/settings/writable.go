package settings

import (
	"cmp"
	"fmt"
	"os"
)

// CheckWritable makes sure the directories a run writes to can be written before any
// training, rather than at the first save: it creates each (and its parents) if
// missing, then creates, writes and removes a probe file in it. --save is checked on
// every process (each rank writes its shards); --out-dir and --tensorboard-dir only
// where reports is set (the process of world rank 0, which writes them). The error
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

// probe creates dir if missing and writes, closes and removes a file in it.
func probe(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
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
