package report_test

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"

	"megago/examples/internal/report"
	"megago/parallel"
	"megago/tensor"
)

// Every rank gets every rank's numbers, in rank order: rank r's tensors peak at what it
// allocated, and what it still holds is what it did not release.
func TestGatherMemory(t *testing.T) {
	const ranks = 3
	const f32 = 4                                                       // bytes of a float32
	held := func(r int) int64 { return int64(1000 * (r + 1) * f32) }    // kept to the end
	temp := func(r int) int64 { return int64(500 * (ranks - r) * f32) } // released before
	got := make([][]report.Memory, ranks)
	err := parallel.RunLocal(ranks, func(c parallel.Comm) error {
		r := c.Rank()
		dev := tensor.NewCPU()
		keep := tensor.Zeros(dev, tensor.F32, int(held(r)/f32))
		defer keep.Release()
		tensor.Zeros(dev, tensor.F32, int(temp(r)/f32)).Release()
		ms, err := report.GatherMemory(context.Background(), c, dev)
		got[r] = ms
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for r, ms := range got {
		if len(ms) != ranks {
			t.Fatalf("rank %d got %d ranks' numbers, want %d", r, len(ms), ranks)
		}
		for q, m := range ms {
			want := report.Memory{Rank: q, PeakRSS: ms[0].PeakRSS, TensorPeak: held(q) + temp(q), TensorHeld: held(q)}
			if m != want {
				t.Errorf("rank %d's view of rank %d: %+v, want %+v", r, q, m, want)
			}
			if runtime.GOOS == "linux" && m.PeakRSS <= 0 {
				t.Errorf("rank %d: peak RSS %d on Linux, want > 0", q, m.PeakRSS)
			}
		}
	}
}

// Report.Memory prints one line a rank and writes one "memory" record.
func TestReportMemory(t *testing.T) {
	var out bytes.Buffer
	dir := t.TempDir()
	rep, err := report.New(&out, report.Options{OutDir: dir, Iters: 1, LogInterval: 1, Model: "GPT"})
	if err != nil {
		t.Fatal(err)
	}
	rep.Memory([]report.Memory{
		{Rank: 0, PeakRSS: 812e6, TensorPeak: 640e6, TensorHeld: 12e6},
		{Rank: 1, PeakRSS: 800e6, TensorPeak: 600e6, TensorHeld: 12e6},
	})
	if err := rep.Close(); err != nil {
		t.Fatal(err)
	}
	want := "memory: rank 0 peak RSS 812 MB, tensors peak 640 MB (activations 628 MB; parameters, gradients and optimizer 12 MB)\n" +
		"memory: rank 1 peak RSS 800 MB, tensors peak 600 MB (activations 588 MB; parameters, gradients and optimizer 12 MB)\n"
	if !strings.HasPrefix(out.String(), want) {
		t.Errorf("printed\n%s\nwant\n%s", out.String(), want)
	}
	recs, err := report.ReadRecords(dir + "/metrics.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0]["kind"] != "memory" {
		t.Fatalf("records %v, want one of kind memory", recs)
	}
	r1 := recs[0]["ranks"].([]any)[1].(map[string]any)
	if r1["rank"] != 1.0 || r1["activations"] != 588e6 || r1["peak_rss"] != 800e6 {
		t.Errorf("rank 1's record %v, want rank 1, activations 588e6, peak_rss 800e6", r1)
	}
}
