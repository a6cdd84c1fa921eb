package nn

import (
	"runtime"
	"sync"
	"unsafe"

	"megago/tensor"
)

// hostRows returns logits [1, R, Vp] over their first v columns as float64 rows, [R][v],
// in c's buffers (which it grows as needed and the next call overwrites). F32 logits
// (the usual case) are widened in blocks of rows on up to GOMAXPROCS goroutines: for 32
// rows of GPT-2's vocabulary the conversion took ~2 ms of one core per engine step, while
// the other waited. Logits in host memory (the CPU backend's) are read in place; others
// are copied, a block at a time, into c.host, and widened while in cache. Widening is
// exact, so the values do not depend on the split.
func (c *SlotCache) hostRows(logits *tensor.Tensor, v int) [][]float64 {
	r, vp := logits.Dim(1), logits.Dim(2)
	c.logits = growTo(c.logits, r*v)
	buf := c.logits
	if logits.DType() == tensor.F32 {
		var in []float32 // logits' elements in place, or nil
		if b := logits.HostBytes(); b != nil {
			in = unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
		} else {
			c.host = growTo(c.host, r*vp)
		}
		workers := min(r, runtime.GOMAXPROCS(0))
		var wg sync.WaitGroup
		for w := workers - 1; w >= 0; w-- { // the caller takes block 0, after starting the others
			lo, hi := w*r/workers, (w+1)*r/workers
			widen := func() {
				var host []float32 // rows [lo, hi) of logits
				if in != nil {
					host = in[lo*vp : hi*vp]
				} else {
					host = tensor.ReadInto(c.host[lo*vp:hi*vp], logits.Narrow(1, lo, hi-lo)) // [1, hi-lo, Vp]
				}
				for i := range hi - lo { // drop the padded columns
					row := buf[(lo+i)*v : (lo+i+1)*v]
					for j, x := range host[i*vp : i*vp+v] {
						row[j] = float64(x)
					}
				}
			}
			if w == 0 {
				widen()
			} else {
				wg.Go(widen)
			}
		}
		wg.Wait()
	} else {
		for i, x := range tensor.ToSlice[float64](logits) {
			if j := i % vp; j < v {
				buf[i/vp*v+j] = x
			}
		}
	}
	rows := make([][]float64, r)
	for i := range rows {
		rows[i] = buf[i*v : (i+1)*v : (i+1)*v]
	}
	return rows
}

// growTo returns s resliced to n elements, reallocated (contents dropped) when its
// capacity is smaller, then with room to double: a buffer sized by a step's row count
// is not reallocated at every step while that count grows.
func growTo[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, max(n, 2*cap(s)))
	}
	return s[:n]
}
