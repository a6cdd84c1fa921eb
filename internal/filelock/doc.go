// Package filelock takes advisory locks on open files with flock(2). A lock belongs to
// the open file: the kernel drops it when the file is closed or its process dies, so a
// holder that crashes never leaves a stale lock behind, and two opens of one file in the
// same process exclude each other as two processes do.
//
// TryLock and Lock lock an open file; Acquire locks a lock file at a path and records the
// holder's process id in it, so that the one refused can say who holds it (HeldError).
//
// Locks are taken on Unix systems (Supported); elsewhere TryLock and Lock succeed without
// locking anything, and callers that must know whether a file is in use (such as
// atomicfile.RemoveStale) do nothing there. A file system without flock support (some
// network file systems) gives an error matching errors.ErrUnsupported.
package filelock
