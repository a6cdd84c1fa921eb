package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/data"
	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// TestCPBatchSlices: under context parallelism each rank's micro-batch holds, of every
// sample, the tokens, labels (loss mask applied), positions and documents at the
// sequence positions nn.CPPositions gives the rank, in that order.
func TestCPBatchSlices(t *testing.T) {
	const rows, seq = 2, 16
	// Each value names its sample and position: 100·sample + position.
	b := data.GPTBatch{B: rows, T: seq}
	for row := range rows {
		for p := range seq {
			v := int32(100*row + p)
			b.Tokens = append(b.Tokens, v)
			b.Labels = append(b.Labels, v+1)
			b.LossMask = append(b.LossMask, float32(p%3%2)) // masked where p%3 ≠ 1
			b.PositionIDs = append(b.PositionIDs, v+2)
			b.Segments = append(b.Segments, v+3)
		}
	}
	dev := tensor.NewCPU()
	for _, cp := range []int{1, 2, 4} {
		for r := range cp {
			t.Run(fmt.Sprintf("cp%d rank%d", cp, r), func(t *testing.T) {
				mb := gptBatches{b}.microBatches(dev, true, cpRank{rank: r, size: cp})(0)
				pos := nn.CPPositions(seq, cp, r)
				var ids, labels, positions, docs []int32
				for row := range rows {
					for _, p := range pos {
						v := int32(100*row + p)
						ids, positions, docs = append(ids, v), append(positions, v+2), append(docs, v+3)
						label := v + 1
						if p%3 != 1 {
							label = -100
						}
						labels = append(labels, label)
					}
				}
				for _, x := range []*tensor.Tensor{mb.IDs, mb.Labels, mb.Positions, mb.Segments} {
					assert.Equal(t, tensor.Shape{rows, seq / cp}, x.Shape())
				}
				assert.Equal(t, ids, tensor.ToSlice[int32](mb.IDs), "ids")
				assert.Equal(t, labels, tensor.ToSlice[int32](mb.Labels), "labels, -100 where the loss mask is 0")
				assert.Equal(t, positions, tensor.ToSlice[int32](mb.Positions), "positions")
				assert.Equal(t, docs, tensor.ToSlice[int32](mb.Segments), "documents")
			})
		}
	}
}

// TestCPRankOfMesh: the batch slicer takes the rank's CP coordinate and the CP size
// from the mesh (TP fastest, then CP).
func TestCPRankOfMesh(t *testing.T) {
	err := parallel.RunLocal(8, func(world parallel.Comm) error {
		mesh, err := parallel.NewMesh(t.Context(), world, parallel.Sizes{TP: 2, CP: 2})
		if err != nil {
			return err
		}
		if got, want := cpRankOf(mesh), (cpRank{rank: world.Rank() / 2 % 2, size: 2}); got != want {
			t.Errorf("rank %d: cpRankOf = %+v, want %+v", world.Rank(), got, want)
		}
		return nil
	})
	require.NoError(t, err)
}

// gradNormTol bounds the relative difference of one step's gradient norm between
// layouts: float32 sums reordered by the attention blocks' log-sum-exp combination and
// the DP × CP all-reduce (relative error ~1e-6).
const gradNormTol = 1e-4

// TestCPSettings: --context-parallel-size and its companions reach the mesh sizes, the
// data-parallel size and the model's configuration.
func TestCPSettings(t *testing.T) {
	for _, tc := range []struct {
		args                []string
		cp, dp              int
		commType, hierarchy string
	}{
		{[]string{"--ranks", "2", "--context-parallel-size", "2"}, 2, 1, "", ""},
		{[]string{"--ranks", "8", "--context-parallel-size", "2", "--tensor-model-parallel-size", "2", "--sequence-parallel"}, 2, 2, "", ""},
		{[]string{"--ranks", "4", "--context-parallel-size", "4", "--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "2", "2"}, 4, 1, "a2a+p2p", "2,2"},
		{[]string{"--ranks", "2", "--context-parallel-size", "2", "--cp-comm-type", "p2p", "allgather", "a2a", "all_gather"}, 2, 1, "p2p,allgather,a2a,all_gather", ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			c, err := parseConfig(tinyArgs(t, tc.args...), 0, io.Discard)
			require.NoError(t, err)
			assert.Equal(t, tc.cp, c.meshSizes().CP)
			assert.Equal(t, tc.dp, c.DP)
			m := c.modelConfig(0)
			assert.Equal(t, tc.cp, m.CP)
			assert.Equal(t, tc.commType, m.CPCommType)
			assert.Equal(t, tc.hierarchy, m.CPHierarchy)
		})
	}
}

// TestCPSettingsRefused: what context parallelism cannot run is refused before any work,
// in the flags' words.
func TestCPSettingsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"ranks", []string{"--ranks", "6", "--context-parallel-size", "4"}, "6 ranks do not divide into TP=1 × CP=4 × PP=1"},
		{"sequence", []string{"--ranks", "4", "--context-parallel-size", "4", "--seq-length", "36", "--max-position-embeddings", "36"},
			"--seq-length 36 is not divisible by 2 × --context-parallel-size 4"},
		{"sequence parallel", []string{"--ranks", "8", "--context-parallel-size", "2", "--tensor-model-parallel-size", "4", "--sequence-parallel",
			"--seq-length", "24", "--max-position-embeddings", "24"}, "--seq-length 24 is not divisible by 2 × --context-parallel-size 2 × --tensor-model-parallel-size 4"},
		{"a2a heads", []string{"--ranks", "8", "--context-parallel-size", "8", "--cp-comm-type", "a2a"}, "must divide by the all-to-all size 8"},
		{"comm type", []string{"--ranks", "2", "--context-parallel-size", "2", "--cp-comm-type", "ring"}, `--cp-comm-type "ring"`},
		{"hierarchy", []string{"--ranks", "4", "--context-parallel-size", "4", "--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "2"},
			"their product 2 is not --context-parallel-size 4"},
		{"reset position ids", []string{"--ranks", "2", "--context-parallel-size", "2", "--reset-position-ids"},
			"--reset-position-ids and --reset-attention-mask are not implemented under context parallelism"},
		{"reset attention mask", []string{"--ranks", "2", "--context-parallel-size", "2", "--reset-attention-mask"},
			"--reset-position-ids and --reset-attention-mask are not implemented under context parallelism"},
		{"zero", []string{"--context-parallel-size", "0"}, "--context-parallel-size must be at least 1, got 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig(tinyArgs(t, tc.args...), 0, io.Discard)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestCPLayoutsMatchOneRank trains the tiny model with its sequences split over CP ranks
// (each rank its CPPositions of every sample) and compares the loss curve, the
// validation loss and generation with one rank's, as TestLayoutsMatchOneRank does for
// the other layouts, and the first iteration's gradient norm, which AdamW's updates
// would hide if the gradients averaged over DP × CP were off by a factor.
func TestCPLayoutsMatchOneRank(t *testing.T) {
	ref := reference(t)
	refDir := t.TempDir()
	runTiny(t, tinyArgs(t, "--out-dir", refDir, "--train-iters", "2", "--gen-tokens", "0"))
	refNorms := readMetrics(t, filepath.Join(refDir, "metrics.jsonl")).gradNorm
	require.NotEmpty(t, refNorms)
	for _, layout := range [][]string{
		{"--ranks", "2", "--context-parallel-size", "2"},
		{"--ranks", "2", "--context-parallel-size", "2", "--cp-comm-type", "a2a"},
		{"--ranks", "4", "--context-parallel-size", "2", "--tensor-model-parallel-size", "2", "--sequence-parallel"},
		{"--ranks", "4", "--context-parallel-size", "4", "--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "2", "2"},
		{"--ranks", "4", "--context-parallel-size", "4", "--cp-comm-type", "all_gather"},
	} {
		t.Run(strings.Join(layout, " "), func(t *testing.T) {
			dir := t.TempDir()
			out := matchesOneRank(t, ref, append(layout, "--out-dir", dir))
			assert.Contains(t, out, "× CP "+layout[3]+" (") // layout[3]: the --context-parallel-size
			got := readMetrics(t, filepath.Join(dir, "metrics.jsonl")).gradNorm
			require.NotEmpty(t, got)
			assert.InEpsilon(t, refNorms[0], got[0], gradNormTol, "first iteration's gradient norm")
		})
	}
}
