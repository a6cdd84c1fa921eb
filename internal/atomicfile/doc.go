// Package atomicfile writes files so that a reader, or a crash, never sees a partial one:
// the bytes go to a uniquely named temporary file in the destination's directory, which is
// fsynced and renamed over the destination, and then the directory itself is fsynced so
// that the rename survives a power loss.
//
// Files are created with permission 0644 less the process's umask (what os.WriteFile
// gives with 0644), never os.CreateTemp's 0600. On any error the temporary file is
// removed and the destination is left as it was: the old file, or none.
//
// A process killed while writing leaves its temporary file behind. Every temporary file
// (CreateTemp) is therefore locked by its writer (package filelock) until it has its
// final name, and RemoveStale deletes the temporary files of a prefix that nobody locks
// any more: the leftovers of dead writers, never a file being written.
//
// It is the one place megago writes a file atomically: dataset index caches, indexed
// datasets (through CreateTemp and Commit), the CUDA kernel cache, checkpoint manifests
// and trackers, Hugging Face exports and the examples' corpus cache all go through it.
package atomicfile
