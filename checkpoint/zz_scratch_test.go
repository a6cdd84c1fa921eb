package checkpoint

import (
	"bytes"
	"runtime"
	"testing"
	"time"
)

func TestZZNested(t *testing.T) {
	n := 54 << 10
	cases := map[string][]byte{
		"marks":      append(append([]byte("\x80\x02"), bytes.Repeat([]byte("("), n)...), '.'),
		"lists":      append(append(append([]byte("\x80\x02"), bytes.Repeat([]byte("]"), n/2)...), bytes.Repeat([]byte("a"), n/2-1)...), '.'),
		"marktuple":  append(append(append([]byte("\x80\x02"), bytes.Repeat([]byte("("), n/2)...), bytes.Repeat([]byte("t"), n/2)...), '.'),
		"emptylists": append(append([]byte("\x80\x02"), bytes.Repeat([]byte("]"), n)...), '.'),
		"markempty":  append(append([]byte("\x80\x02"), bytes.Repeat([]byte("(]"), n/2)...), '.'),
		"tuple1":     append(append([]byte("\x80\x02]"), bytes.Repeat([]byte("\x85"), n)...), '.'),
		"dup":        append(append([]byte("\x80\x02]"), bytes.Repeat([]byte("2"), n)...), '.'),
	}
	for name, pkl := range cases {
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		t0 := time.Now()
		_, err := unpickle(pkl, func(key string, numel, elem int) ([]byte, error) { return nil, nil })
		runtime.ReadMemStats(&b)
		t.Logf("%s: %d bytes: %v alloc %d MB in %v", name, len(pkl), err, (b.TotalAlloc-a.TotalAlloc)>>20, time.Since(t0))
	}
}
