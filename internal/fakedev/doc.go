// Package fakedev is a second, in-tree tensor backend that exists to prove the
// tensor.Backend interface before a GPU backend does. It registers itself as "fake" with
// tensor.Register in init, so importing it for its side effect (as internal/testutil does)
// makes every backend-generic test run on it too.
//
// It behaves like a device with its own memory:
//
//   - A Buffer is an opaque handle. The storage behind it lives in a table private to the
//     backend (CPU backend storage, so every kernel is the CPU kernel: results are bit for
//     bit those of "cpu"). Nothing outside the backend can reach the bytes except through
//     WriteHost and ReadHost, which are counted as host→device and device→host copies
//     (Stats). A test that runs a chain of ops between one upload and one download and sees
//     exactly those two copies has shown that the ops stay on the device.
//   - New storage is filled with 0xFF bytes (NaN for floats), so a kernel or op that reads
//     an output before writing it, relying on zeroed memory, shows NaNs or garbage.
//   - Storage returned to the device's pool is poisoned the same way (tensor.Poisoner), so
//     a stale read through a recycled buffer is conspicuous.
//   - Free removes the handle: any later use panics with "fakedev: use of freed buffer".
//     Every span a kernel receives is also checked against its buffer's dtype and size.
//
// The backend is safe for concurrent use: the handle table is guarded by a mutex that is
// not held while a kernel runs.
//
// Main types, in reading order: Backend (New, Stats, PeekBytes) and Stats.
package fakedev
