package checkpoint

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"megago/tensor"
)

// reshardTol bounds the differences between layouts after loading: TP all-reduces and
// DP averaging reorder float64 sums (relative error ~1e-16 per op); one Adam step of
// size ~lr·m/√v carries such differences into the parameters only through its gradients.
const reshardTol = 1e-9

// A checkpoint saved at (TP=2, PP=2, DP=1) after 3 iterations loads at (1, 1, 1),
// (4, 1, 1) and (1, 2, 2) with the distributed optimizer — vocabularies padded to 56, 52,
// 64 and 52 rows — and gives the same logits; one more iteration then makes the same
// update everywhere (optimizer moments, step count, schedule and loss scaler resharded).
// The last layout saves again, with its optimizer state split over DP by flat ranges,
// and (2, 1, 1) loads that and gives the same logits.
func TestReshard(t *testing.T) {
	const saved = 3
	src := layout{tp: 2, pp: 2, dp: 1, tied: true}
	dir, dir2 := t.TempDir(), t.TempDir()
	runLayout(t, src, func(ctx context.Context, r *rig) error {
		for it := range saved {
			if _, err := r.step(ctx, it); err != nil {
				return err
			}
		}
		return Save(ctx, dir, r.mesh, r.st)
	})

	// after loads dir at l and returns the logits, the parameters after one more
	// iteration and that iteration's learning rate and loss.
	type after struct {
		logits   []float64
		next     []float64 // logits after the step (when saving)
		params   map[string][]float64
		lr, loss float64
	}
	run := func(l layout, from string, saveTo string) after {
		var mu sync.Mutex
		a := after{params: map[string][]float64{}}
		runLayout(t, l, func(ctx context.Context, r *rig) error {
			if _, err := Load(ctx, from, r.mesh, r.st, LoadOptions{}); err != nil {
				return err
			}
			lg, err := r.logits(ctx)
			if err != nil {
				return err
			}
			res, err := r.step(ctx, r.st.Iteration)
			if err != nil {
				return err
			}
			r.params(a.params, &mu)
			mu.Lock()
			if lg != nil {
				a.logits = lg
			}
			a.lr, a.loss = res.LR, res.Loss
			mu.Unlock()
			if saveTo == "" {
				return nil
			}
			if lg, err = r.logits(ctx); err != nil {
				return err
			}
			if lg != nil {
				mu.Lock()
				a.next = lg
				mu.Unlock()
			}
			return Save(ctx, saveTo, r.mesh, r.st)
		})
		return a
	}
	ref := run(src, dir, "")
	compare := func(name string, got, want after) {
		t.Helper()
		if d := maxRelDiff(got.logits, want.logits); !(d <= reshardTol) {
			t.Errorf("%s: logits differ by %g", name, d)
		}
		if got.lr != want.lr || !(maxRelDiff([]float64{got.loss}, []float64{want.loss}) <= reshardTol) {
			t.Errorf("%s: lr %v loss %v, want %v %v", name, got.lr, got.loss, want.lr, want.loss)
		}
		worst := 0.0
		for p, w := range want.params {
			worst = max(worst, maxRelDiff(got.params[p], w))
		}
		t.Logf("%s: logits differ by %.2g, parameters after one step by %.2g", name, maxRelDiff(got.logits, want.logits), worst)
		if len(got.params) != len(want.params) {
			t.Errorf("%s: %d parameters, want %d", name, len(got.params), len(want.params))
		}
		for p, w := range want.params {
			if d := maxRelDiff(got.params[p], w); !(d <= reshardTol) {
				t.Errorf("%s: %s differs by %g after one step", name, p, d)
			}
		}
	}
	for _, l := range []layout{
		{tp: 1, pp: 1, dp: 1, tied: true},
		{tp: 4, pp: 1, dp: 1, tied: true},
		{tp: 1, pp: 2, dp: 2, distributed: true, tied: true},
	} {
		saveTo := ""
		if l.distributed {
			saveTo = dir2
		}
		got := run(l, dir, saveTo)
		compare(l.String(), got, ref)
		if saveTo != "" {
			m, err := ReadManifest(dir2 + "/" + IterDir(saved+1))
			if err != nil {
				t.Fatal(err)
			}
			if !m.Layout.DistributedOptimizer {
				t.Errorf("%v saved a manifest without the distributed optimizer: %+v", l, m.Layout)
			}
			again := run(layout{tp: 2, pp: 1, dp: 1, tied: true}, dir2, "")
			if d := maxRelDiff(again.logits, got.next); !(d <= reshardTol) {
				t.Errorf("tp2 from %v: logits differ by %g", l, d)
			}
		}
	}
	// Offline: megago convert's Reshard writes (4, 1) and (1, 2) copies with the
	// optimizer state per parameter; (2, 2, 1) loads them and continues as before.
	for _, to := range []WriteOptions{{TP: 4}, {PP: 2}} {
		out := t.TempDir()
		if _, err := Reshard(context.Background(), dir, out, to); err != nil {
			t.Fatal(err)
		}
		compare(fmt.Sprintf("reshard to tp%d-pp%d, load at %v", to.TP, to.PP, src), run(src, out, ""), ref)
	}
	if len(ref.logits) != hBatch*hSeq*hVocab {
		t.Errorf("%d logits", len(ref.logits))
	}
}

// A checkpoint of F32 parameters loads into BF16 parameters with FP32 master weights
// (taken from the saved parameters, which have no separate masters) and the reverse: the
// masters are exact, the BF16 parameters their rounding.
func TestLoadOtherDType(t *testing.T) {
	f32 := layout{tp: 1, pp: 1, dp: 1, dtype: tensor.F32}
	bf16 := layout{tp: 2, pp: 1, dp: 2, distributed: true, dtype: tensor.BF16}
	var mu sync.Mutex
	for _, tc := range []struct{ from, to layout }{{f32, bf16}, {bf16, f32}} {
		dir := t.TempDir()
		saved := map[string][]float64{}
		runLayout(t, tc.from, func(ctx context.Context, r *rig) error {
			if _, err := r.step(ctx, 0); err != nil {
				return err
			}
			r.params(saved, &mu)
			return Save(ctx, dir, r.mesh, r.st)
		})
		got, masters := map[string][]float64{}, map[string][]float64{}
		runLayout(t, tc.to, func(ctx context.Context, r *rig) error {
			if _, err := Load(ctx, dir, r.mesh, r.st, LoadOptions{}); err != nil {
				return err
			}
			r.params(got, &mu)
			r.masters(masters, &mu)
			_, err := r.step(ctx, 1) // and training goes on
			return err
		})
		for name, w := range saved {
			for i, v := range got[name] {
				if want := float64(tensor.BF16FromFloat64(w[i]).Float32()); tc.to.dtype == tensor.BF16 && v != want ||
					tc.to.dtype == tensor.F32 && v != w[i] {
					t.Fatalf("%v → %v: %s[%d] = %v, saved %v", tc.from, tc.to, name, i, v, w[i])
				}
			}
			if tc.to.dtype == tensor.BF16 && tc.from.dtype == tensor.F32 && maxRelDiff(masters[name], w) != 0 {
				t.Errorf("%s: master weights differ from the saved F32 parameters by %g", name, maxRelDiff(masters[name], w))
			}
		}
	}
}
