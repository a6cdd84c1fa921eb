package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"megago/internal/ckptlayout"
	"megago/internal/filelock"
)

// JobLockFile is the lock file a training job holds in its checkpoint directory for its
// whole life (LockDir), so that a second job given the same directory refuses to start.
// It is another file than LockFile, which every save takes for its own duration: the
// job's lock and its saves' locks are two open files and never conflict.
const JobLockFile = ckptlayout.JobLockFile

// LockDir creates dir if needed and takes its job lock (JobLockFile) without waiting,
// recording this process's id in it; rank 0 of a job that saves to dir calls it before
// training and calls unlock when the job ends. The kernel releases the lock when its
// holder dies, so a crashed job never blocks the next one. While another job holds it,
// LockDir returns an error naming dir and that job's process id. Saves do not need it
// (each takes LockFile); it only makes the refusal come at the start of the second job
// rather than at its first save, after its training.
func LockDir(dir string) (unlock func() error, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint: locking %s: %w", dir, err)
	}
	l, err := filelock.Acquire(filepath.Join(dir, JobLockFile))
	var held *filelock.HeldError
	if errors.As(err, &held) {
		return nil, fmt.Errorf("checkpoint: another job saves to %s: %w", dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: locking %s: %w", dir, err)
	}
	return l.Release, nil
}
