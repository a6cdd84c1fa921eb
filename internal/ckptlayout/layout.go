package ckptlayout

import "fmt"

// Names in a checkpoint directory.
const (
	// TrackerFile holds the number of the latest complete checkpoint, as in Megatron.
	TrackerFile = "latest_checkpointed_iteration.txt"
	// JobLockFile is the lock file a training job holds for its whole life.
	JobLockFile = ".megago-job.lock"
)

// IterDir returns the name of iteration it's directory: iter_0000100 for 100.
func IterDir(it int) string { return fmt.Sprintf("iter_%07d", it) }
