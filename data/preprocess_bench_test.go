package data

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// synthVocab is the NullTokenizer vocabulary of the synthetic inputs below.
const synthVocab = 50257

// writeSynthInput writes about size bytes of JSON lines with pre-tokenized text (random ids
// for the NullTokenizer, 20-200 per line) and returns the path and the exact size.
func writeSynthInput(t testing.TB, dir string, size int64, seed uint64) (string, int64) {
	t.Helper()
	path := filepath.Join(dir, fmt.Sprintf("synth_%d.jsonl", size))
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	rng := rand.New(rand.NewPCG(seed, 1))
	var n int64
	var sb strings.Builder
	for n < size {
		sb.Reset()
		for i := range 20 + rng.IntN(181) {
			if i > 0 {
				sb.WriteByte(' ')
			}
			sb.WriteString(strconv.Itoa(rng.IntN(synthVocab - 1)))
		}
		line, _ := json.Marshal(map[string]string{"text": sb.String()})
		w.Write(line)
		w.WriteByte('\n')
		n += int64(len(line)) + 1
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path, n
}

// heapLive is the runtime/metrics name of the heap found live by the last GC; sampling it
// measures what a computation retains, independent of when garbage happens to be collected.
const heapLive = "/gc/heap/live:bytes"

// peakHeap runs f while sampling the live heap every 100µs and returns the largest value
// seen above the live heap at the start.
func peakHeap(f func()) uint64 {
	sample := []metrics.Sample{{Name: heapLive}}
	read := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	runtime.GC()
	base := read()
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Microsecond)
		defer tick.Stop()
		for {
			peak = max(peak, read())
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	f()
	close(stop)
	wg.Wait()
	peak = max(peak, read())
	if peak < base {
		return 0
	}
	return peak - base
}

// TestPreprocessMemoryBounded checks that the preprocessor streams: its peak heap on an input
// ten times larger stays under 1.5 times its peak on the smaller one.
func TestPreprocessMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 17 MB of input")
	}
	// A low GC target keeps the heap close to what is live, so that the peak measures what
	// the pipeline holds rather than when the collector happened to run.
	defer debug.SetGCPercent(debug.SetGCPercent(25))
	dir := t.TempDir()
	tok := newTestNullTokenizer(t, synthVocab)
	inputs := map[int64]string{}
	run := func(size int64) uint64 {
		input := inputs[size]
		if input == "" {
			input, _ = writeSynthInput(t, dir, size, uint64(size))
			inputs[size] = input
		}
		// Batches of 32 lines (about 20 kB) keep what the pipeline holds in flight well
		// below the small input, so that both runs fill it.
		cfg := PreprocessConfig{Input: input, OutputPrefix: filepath.Join(dir, "out"), AppendEOD: true, Workers: 2, BatchLines: 32}
		var err error
		peak := peakHeap(func() { _, err = Preprocess(context.Background(), cfg, tok) })
		if err != nil {
			t.Fatal(err)
		}
		return peak
	}
	// The peak is a maximum over the run, so a longer run sees more chances of a spike
	// (a GC that finds more in flight than usual); the least of three peaks of each size
	// measures what the pipeline holds.
	const small = 512 << 10
	run(small) // warm up: the first run also pays for one-time allocations
	p1, p10 := uint64(math.MaxUint64), uint64(math.MaxUint64)
	for range 3 {
		p1 = min(p1, run(small))
		p10 = min(p10, run(10*small))
	}
	t.Logf("peak live heap above baseline: %.2f MB on %.1f MB of input, %.2f MB on %.1f MB", float64(p1)/1e6, float64(small)/(1<<20), float64(p10)/1e6, float64(10*small)/(1<<20))
	if float64(p10) >= 1.5*float64(p1) {
		t.Errorf("peak heap %d bytes on the 10x input, %d on the 1x input: want under 1.5x", p10, p1)
	}
}

// BenchmarkPreprocess measures preprocessing throughput (NullTokenizer, EOD appended) on an
// 8 MB synthetic input, in MB of input per second.
func BenchmarkPreprocess(b *testing.B) {
	dir := b.TempDir()
	input, size := writeSynthInput(b, dir, 8<<20, 1)
	tok := newTestNullTokenizer(b, synthVocab)
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			cfg := PreprocessConfig{Input: input, OutputPrefix: filepath.Join(dir, "out"), AppendEOD: true, Workers: workers}
			start := time.Now()
			for b.Loop() {
				if _, err := Preprocess(context.Background(), cfg, tok); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(size)*float64(b.N)/1e6/time.Since(start).Seconds(), "MB/s")
		})
	}
}

// BenchmarkIndexedRandomRead reads random whole sequences (uint16, 1-256 tokens, 100,000
// sequences) into a reused buffer, in each read mode.
func BenchmarkIndexedRandomRead(b *testing.B) {
	prefix := filepath.Join(b.TempDir(), "bench")
	bld, err := NewIndexedBuilder(prefix, Uint16)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ids := make([]int32, 256)
	for i := range 100_000 {
		if err := bld.AddSequence(ids[:1+rng.IntN(256)]); err != nil {
			b.Fatal(err)
		}
		if i%8 == 7 {
			bld.EndDocument()
		}
	}
	bld.EndDocument()
	if err := bld.Finalize(); err != nil {
		b.Fatal(err)
	}
	for _, mode := range allReadModes {
		b.Run(mode.String(), func(b *testing.B) {
			ds, err := OpenIndexed(prefix, mode)
			if err != nil {
				b.Fatal(err)
			}
			defer ds.Close()
			var dst []int32
			start := time.Now()
			for b.Loop() {
				i := rng.IntN(ds.NumSequences())
				dst = ds.AppendTokens(dst[:0], i, 0, ds.SequenceLen(i))
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "reads/s")
		})
	}
}
