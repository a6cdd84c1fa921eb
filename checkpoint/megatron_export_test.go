package checkpoint

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"megago/tensor"
)

// The Megatron fixtures, imported, exported at other layouts (Transformer Engine's names
// and local ones, a release and an iteration) and imported again, give back the same
// tensors, bit for bit, and the same configuration.
func TestMegatronExportRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		vocab   int
		opts    MegatronExportOptions
	}{
		{"gpt2_tp2", 50, MegatronExportOptions{TP: 2, PP: 2, Iteration: 3, ConsumedSamples: 24}},
		{"gpt2_tp2", 50, MegatronExportOptions{TP: 1, PP: 1, Local: true}},
		{"llama_tp2_pp2", 0, MegatronExportOptions{TP: 2, PP: 1, Local: true, Iteration: 9}},
		{"llama_tp2_pp2", 0, MegatronExportOptions{TP: 1, PP: 4, DType: tensor.F32}},
	} {
		tp, pp := tc.opts.sizes()
		t.Run(fmt.Sprintf("%s_to_tp%d_pp%d_local=%v", tc.fixture, tp, pp, tc.opts.Local), func(t *testing.T) {
			m, global, _, err := ImportMegatron(filepath.Join("testdata", "megatron", tc.fixture), MegatronOptions{Vocab: tc.vocab})
			must(t, err)
			dir := t.TempDir()
			notes, err := ExportMegatron(dir, m, global, tc.opts)
			must(t, err)
			if len(notes) == 0 || !strings.Contains(notes[0], "--ckpt-format torch") {
				t.Errorf("notes %q", notes)
			}
			m2, global2, info, err := ImportMegatron(dir, MegatronOptions{})
			must(t, err)
			if err := m2.Compatible(m); err != nil {
				t.Error(err)
			}
			if info.TP != tp || info.PP != pp || info.Iteration != tc.opts.Iteration || info.ConsumedSamples != tc.opts.ConsumedSamples ||
				info.TransformerEngineKeys == tc.opts.Local || len(info.Warnings) > 0 {
				t.Errorf("imported %+v", info)
			}
			for name, want := range global {
				got := global2[name]
				if tc.opts.DType != 0 {
					want = want.Cast(tc.opts.DType)
				}
				if got == nil || !got.Shape().Equal(want.Shape()) || string(tensorBytes(got)) != string(tensorBytes(want)) {
					t.Errorf("%s differs after export and import", name)
				}
			}
			if len(global2) != len(global) {
				t.Errorf("%d tensors back, want %d", len(global2), len(global))
			}
			if _, err := ExportMegatron(dir, m, global, tc.opts); err == nil || !strings.Contains(err.Error(), "already exists") {
				t.Errorf("exporting over an existing iteration: %v", err)
			}
		})
	}
}
