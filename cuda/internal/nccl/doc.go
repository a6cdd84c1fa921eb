// Package nccl binds NCCL (libnccl), NVIDIA's collective communication library: the
// communicator calls (unique id, init, abort, asynchronous errors) and the collectives
// and point-to-point calls that package cuda's Comm queues on its streams. Nothing here
// is public API.
package nccl
