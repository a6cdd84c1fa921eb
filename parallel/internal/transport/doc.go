// Package transport holds what parallel's transports share: the in-process transport
// in package parallel and the TCP transport in parallel/tcp. It is internal so that
// none of it becomes API.
//
//   - kind.go: Kind, what a communication call does (all-reduce, send, ...), with the
//     name errors give it.
//   - check.go: the argument checks every transport makes, panicking on caller bugs with
//     the same messages.
//   - hostbuf.go: tensors as host bytes, and Reduce and Finish, the element-wise
//     arithmetic of a reduction over little-endian bytes of any dtype.
//
// Op mirrors parallel.Op value for value (a test in package parallel pins it), so a
// transport converts with transport.Op(op).
package transport
