package tensor

import "unsafe"

// HostBytes returns t's elements in place, as the little-endian bytes of its dtype
// (Numel·DType.Size bytes), when its storage is host memory the CPU backend owns, so that
// code that moves tensors through the operating system (sockets, files) can skip a copy.
// It returns nil when another backend owns the storage (device memory is opaque: use
// ReadHost and WriteHost) and when t has no elements.
//
// The slice aliases t: writing it changes t and every view sharing its storage, without
// autograd knowing. It is valid while t is live; after t's storage is released it may
// belong to another tensor. It panics if t has been released.
func (t *Tensor) HostBytes() []byte {
	t.checkLive("HostBytes")
	b, ok := t.st.buf.(*cpuBuf)
	if !ok || t.Numel() == 0 {
		return nil
	}
	sz := t.dtype.Size()
	all := unsafe.Slice((*byte)(unsafe.Pointer(&b.words[0])), len(b.words)*8)
	lo := t.off * sz
	hi := lo + t.Numel()*sz
	return all[lo:hi:hi]
}
