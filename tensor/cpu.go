package tensor

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// cpuBackend is the portable CPU backend: plain Go loops over slices that define the
// reference semantics every other backend (and every future SIMD fast path) is tested
// against. F64 and integer tensors are computed in float64, the rest in float32; BF16 and
// F16 operands are widened to float32 for the computation and rounded back (nearest even).
type cpuBackend struct{}

func init() { Register("cpu", func() (Backend, error) { return cpuBackend{}, nil }) }

// cpuBuf is CPU storage: 8-byte aligned bytes.
type cpuBuf struct {
	words []uint64
	n     int // elements
	dt    DType
}

func (cpuBackend) Name() string { return "cpu" }

// Sync does nothing: every kernel has run when its method returns.
func (cpuBackend) Sync() {}

func (cpuBackend) Alloc(dt DType, n int) Buffer {
	return &cpuBuf{words: make([]uint64, (n*dt.Size()+7)/8), n: n, dt: dt}
}

func (cpuBackend) Free(Buffer) {} // the garbage collector reclaims it

// Poison fills released storage with NaN bytes (0xFF…), so stale reads are conspicuous.
func (cpuBackend) Poison(b Buffer, _ DType, _ int) {
	fillSlice(b.(*cpuBuf).words, math.MaxUint64)
}

// raw reinterprets a span's storage as E without conversion. It panics if E's size does
// not match the span's dtype.
func raw[E Elem](s Span) []E {
	b := s.Buf.(*cpuBuf)
	var z E
	if int(unsafe.Sizeof(z)) != s.DType.Size() || b.dt.Size() != s.DType.Size() {
		panic(fmt.Sprintf("tensor: cpu: %T view of %v storage", z, s.DType))
	}
	n := s.Numel()
	if n == 0 {
		return nil
	}
	all := unsafe.Slice((*E)(unsafe.Pointer(&b.words[0])), b.n)
	return all[s.Off : s.Off+n : s.Off+n]
}

func rawBytes(s Span) []byte {
	b := s.Buf.(*cpuBuf)
	sz := s.DType.Size()
	if s.Numel() == 0 {
		return nil
	}
	all := unsafe.Slice((*byte)(unsafe.Pointer(&b.words[0])), b.n*sz)
	return all[s.Off*sz : (s.Off+s.Numel())*sz]
}

// float is the set of compute types.
type float interface{ float32 | float64 }

func computeIs64(dt DType) bool { return dt.Compute() == F64 }

// load returns a span's elements in compute type T: the storage itself when the dtype is
// T, else a converted copy.
func load[T float](s Span) []T {
	if s.Empty() {
		return nil
	}
	var z T
	if _, is64 := any(z).(float64); (is64 && s.DType == F64) || (!is64 && s.DType == F32) {
		return raw[T](s)
	}
	v := make([]T, s.Numel())
	switch s.DType {
	case F64:
		for i, x := range raw[float64](s) {
			v[i] = T(x)
		}
	case F32:
		for i, x := range raw[float32](s) {
			v[i] = T(x)
		}
	case BF16:
		for i, x := range raw[BFloat16](s) {
			v[i] = T(x.Float32())
		}
	case F16:
		for i, x := range raw[Float16](s) {
			v[i] = T(x.Float32())
		}
	case I32:
		for i, x := range raw[int32](s) {
			v[i] = T(x)
		}
	case I64:
		for i, x := range raw[int64](s) {
			v[i] = T(x)
		}
	}
	return v
}

// output returns a slice to compute span s's new contents into: the storage itself when
// s's dtype is T, else scratch that store converts back.
func output[T float](s Span) []T {
	if s.Empty() {
		return nil
	}
	var z T
	if _, is64 := any(z).(float64); (is64 && s.DType == F64) || (!is64 && s.DType == F32) {
		return raw[T](s)
	}
	return make([]T, s.Numel())
}

// store writes v, computed for span s by output or load, back into s's storage (a no-op
// when v is the storage itself).
func store[T float](s Span, v []T) {
	if s.Empty() {
		return
	}
	switch s.DType {
	case F64:
		d := raw[float64](s)
		if len(d) > 0 && len(v) > 0 && unsafe.Pointer(&d[0]) == unsafe.Pointer(&v[0]) {
			return
		}
		for i, x := range v {
			d[i] = float64(x)
		}
	case F32:
		d := raw[float32](s)
		if len(d) > 0 && len(v) > 0 && unsafe.Pointer(&d[0]) == unsafe.Pointer(&v[0]) {
			return
		}
		for i, x := range v {
			d[i] = float32(x)
		}
	case BF16:
		d := raw[BFloat16](s)
		for i, x := range v {
			d[i] = BF16FromFloat64(float64(x))
		}
	case F16:
		d := raw[Float16](s)
		for i, x := range v {
			d[i] = F16FromFloat64(float64(x))
		}
	case I32:
		d := raw[int32](s)
		for i, x := range v {
			d[i] = int32(x)
		}
	case I64:
		d := raw[int64](s)
		for i, x := range v {
			d[i] = int64(x)
		}
	}
}

// indices returns an I32 or I64 span's elements as ints.
func indices(s Span) []int {
	out := make([]int, s.Numel())
	switch s.DType {
	case I32:
		for i, x := range raw[int32](s) {
			out[i] = int(x)
		}
	case I64:
		for i, x := range raw[int64](s) {
			out[i] = int(x)
		}
	default:
		panic(fmt.Sprintf("tensor: indices must be int32 or int64, not %v", s.DType))
	}
	return out
}

// parallelFor runs body over [0, n) split into contiguous chunks on up to GOMAXPROCS
// goroutines, when each chunk would hold at least grain items' worth of work: up to
// parallelForChunks chunks a goroutine, which they pull (runChunks). Each index is
// handled by exactly one chunk, so results do not depend on the split. A panic in body is
// re-raised on the caller's goroutine.
func parallelFor(n, grain int, body func(lo, hi int)) {
	parallelForAtMost(n, grain, n, body)
}

// parallelForAtMost is parallelFor with chunks of at most most items: for long ranges
// whose chunks would otherwise take milliseconds each, so that the last one taken does
// not leave its goroutine running alone that long.
func parallelForAtMost(n, grain, most int, body func(lo, hi int)) {
	workers := runtime.GOMAXPROCS(0)
	if grain < 1 {
		grain = 1
	}
	if w := n / grain; w < workers {
		workers = w
	}
	if workers <= 1 {
		body(0, n)
		return
	}
	chunks := min(n/grain, parallelForChunks*workers)
	runChunks(n, max(1, min(most, (n+chunks-1)/chunks)), workers, body)
}

// parallelForChunks is how many chunks (of at least grain items) parallelFor cuts its
// range into per goroutine, so that one the OS runs late or slowly (other processes on
// the CPUs, waking an idle CPU) holds the others up by a small chunk, not half the work.
// On a loaded 2-CPU VM, 4 ran 4 row ops of 512K floats in 1.18 ms (median) against 1.35 ms
// for 1 (the halves a goroutine), and as fast at 64K and 4M floats.
const parallelForChunks = 4

func (cpuBackend) WriteHost(dst Span, src []byte) { copy(rawBytes(dst), src) }

func (cpuBackend) ReadHost(src Span, dst []byte) { copy(dst, rawBytes(src)) }

func (cpuBackend) Copy2D(dst Span, dstStride int, src Span, srcStride int, rows, cols int) {
	if rows == 0 || cols == 0 {
		return
	}
	parallelFor(rows, max(1, copyGrain/(cols*dst.DType.Size())), func(lo, hi int) {
		d, s := dst, src
		d.Off += lo * dstStride
		s.Off += lo * srcStride
		copyRows(d, dstStride, s, srcStride, hi-lo, cols)
	})
}

// copyGrain is the number of bytes below which Copy2D and Fill stay on one goroutine.
const copyGrain = 1 << 17

func (c cpuBackend) Fill(dst Span, v float64) {
	if math.Float64bits(v) == 0 { // +0 is all zero bits in every dtype
		b := rawBytes(dst)
		parallelFor(len(b), copyGrain, func(lo, hi int) { clear(b[lo:hi]) })
		return
	}
	switch dst.DType {
	case F64:
		fillSlice(raw[float64](dst), v)
	case F32:
		fillSlice(raw[float32](dst), float32(v))
	case BF16:
		fillSlice(raw[BFloat16](dst), BF16FromFloat64(v))
	case F16:
		fillSlice(raw[Float16](dst), F16FromFloat64(v))
	case I32:
		fillSlice(raw[int32](dst), int32(v))
	case I64:
		fillSlice(raw[int64](dst), int64(v))
	}
}

func fillSlice[E any](s []E, v E) {
	grain := max(1, copyGrain/max(1, int(unsafe.Sizeof(v))))
	parallelFor(len(s), grain, func(lo, hi int) {
		for i := range s[lo:hi] {
			s[lo+i] = v
		}
	})
}

func (cpuBackend) Arange(dst Span, start, step float64) {
	v := output[float64](dst)
	for i := range v {
		v[i] = start + float64(i)*step
	}
	store(dst, v)
}

func (cpuBackend) Cast(dst, src Span) {
	switch {
	case dst.DType == src.DType:
		copy(rawBytes(dst), rawBytes(src))
	case dst.DType == I64 && src.DType == I32:
		d := raw[int64](dst)
		for i, x := range raw[int32](src) {
			d[i] = int64(x)
		}
	case dst.DType == I32 && src.DType == I64:
		d := raw[int32](dst)
		for i, x := range raw[int64](src) {
			d[i] = int32(x)
		}
	case src.DType == F64 || src.DType.Compute() == F64 || dst.DType == F64:
		store(dst, load[float64](src)) // one rounding from float64
	default:
		store(dst, load[float32](src))
	}
}

func (cpuBackend) Permute(dst, src Span, perm []int) {
	srcStrides := src.Shape.Strides()
	st := make([]int, len(perm)) // stride in src of each dst dim
	for i, p := range perm {
		st[i] = srcStrides[p]
	}
	switch src.DType.Size() {
	case 8:
		permute(raw[int64](dst), raw[int64](src), dst.Shape, st)
	case 4:
		permute(raw[int32](dst), raw[int32](src), dst.Shape, st)
	default:
		permute(raw[BFloat16](dst), raw[BFloat16](src), dst.Shape, st)
	}
}

// permute walks dst in order, following src with strides st. When the last dim keeps
// stride 1 (a transpose of outer dims, such as splitting attention heads) it copies whole
// rows; the rows are split across goroutines.
func permute[E Elem](dst, src []E, shape Shape, st []int) {
	if len(dst) == 0 {
		return
	}
	run := 1
	if last := len(shape) - 1; last >= 0 && st[last] == 1 {
		run, shape, st = shape[last], shape[:last], st[:last]
	}
	runs := len(dst) / run
	parallelFor(runs, max(1, permuteGrain/run), func(lo, hi int) {
		idx := make([]int, len(shape))
		off := 0
		for d, r := len(shape)-1, lo; d >= 0; d-- {
			idx[d] = r % shape[d]
			r /= shape[d]
			off += idx[d] * st[d]
		}
		for i := lo; i < hi; i++ {
			if run == 1 {
				dst[i] = src[off]
			} else {
				copy(dst[i*run:(i+1)*run], src[off:off+run])
			}
			for d := len(idx) - 1; d >= 0; d-- {
				idx[d]++
				off += st[d]
				if idx[d] < shape[d] {
					break
				}
				off -= st[d] * idx[d]
				idx[d] = 0
			}
		}
	})
}

// permuteGrain is the number of elements below which Permute is not split across
// goroutines.
const permuteGrain = 1 << 15
