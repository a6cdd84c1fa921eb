package tensor

import "fmt"

// ReadInto copies t's elements, converted to T, into dst[:t.Numel()] and returns that
// slice: ToSlice without allocating the result, for a caller that reads a tensor of the
// same size again and again (a decode step's logits). It panics if dst is shorter than t.
func ReadInto[T Elem](dst []T, t *Tensor) []T {
	t.checkLive("ReadInto")
	n := t.Numel()
	if len(dst) < n {
		panic(fmt.Sprintf("tensor: ReadInto: %d elements into a slice of %d", n, len(dst)))
	}
	dst = dst[:n]
	src := t
	if want := DTypeOf[T](); t.dtype != want {
		src = castRaw(t, want)
		defer src.Release()
	}
	t.st.dev.backend.ReadHost(src.Span(), asBytes(dst))
	return dst
}
