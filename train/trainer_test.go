package train

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/nn"
	"megago/optim"
	"megago/parallel"
	"megago/tensor"
)

// TestChunkLayers checks the layer assignment against MEGATRON-FACTS.md: chunk v on
// stage r holds L/(p·V) layers starting at v·(L/V) + r·(L/(p·V)).
func TestChunkLayers(t *testing.T) {
	for _, tc := range []struct {
		l, p, v int
		want    [][]int // [stage][chunk] first layer
	}{
		{8, 1, 1, [][]int{{0}}},
		{8, 2, 1, [][]int{{0}, {4}}},
		{8, 4, 2, [][]int{{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
		{16, 2, 4, [][]int{{0, 4, 8, 12}, {2, 6, 10, 14}}},
	} {
		for r, chunks := range tc.want {
			for v, want := range chunks {
				first, n, err := ChunkLayers(tc.l, tc.p, r, tc.v, v)
				require.NoError(t, err)
				assert.Equal(t, want, first, "L=%d p=%d V=%d stage %d chunk %d", tc.l, tc.p, tc.v, r, v)
				assert.Equal(t, tc.l/(tc.p*tc.v), n)
			}
		}
	}
	_, _, err := ChunkLayers(6, 4, 0, 1, 0)
	assert.ErrorContains(t, err, "6 layers do not split evenly over 4 pipeline stages × 1 model chunks")
	st, err := Stages(8, 4, 3, 2)
	require.NoError(t, err)
	assert.Equal(t, []nn.Stage{{FirstLayer: 3, NumLayers: 1}, {PostProcess: true, FirstLayer: 7, NumLayers: 1}}, st)
}

// TestTiedEmbedding3D: with the word embedding tied to the output layer, the first and
// last stages hold copies whose gradients are summed over the embedding group; training
// matches one rank within tolerance (the summation order across stages differs), and the
// two copies stay equal.
func TestTiedEmbedding3D(t *testing.T) {
	ref := train3D(t, layout{tp: 1, pp: 1, dp: 1, tied: true}, matrixSteps)
	for _, l := range []layout{
		{tp: 2, pp: 2, dp: 2, tied: true},
		{tp: 1, pp: 4, dp: 1, interleaved: true, tied: true},
		{tp: 2, pp: 2, dp: 2, interleaved: true, sp: true, tied: true, distributed: true},
	} {
		t.Run(l.String(), func(t *testing.T) {
			compareTol(t, ref, train3D(t, l, matrixSteps))
		})
	}
}

// TestTiedCopiesStayEqual: after training with PP=2, the last stage's Shared copy of the
// word embedding equals the first stage's embedding bit for bit.
func TestTiedCopiesStayEqual(t *testing.T) {
	var mu sync.Mutex
	copies := map[int][]float64{}
	err := parallel.RunLocal(2, func(world parallel.Comm) error {
		ctx := context.Background()
		mesh, err := parallel.NewMesh(ctx, world, parallel.Sizes{PP: 2})
		if err != nil {
			return err
		}
		dev := tensor.NewCPU()
		b := &nn.Builder{Dev: dev, DType: tensor.F64, RNG: tensor.NewRNG(7), TP: mesh.TP()}
		chunks, err := NewGPTChunks(b, tinyGPTConfig(true), mesh, 1)
		if err != nil {
			return err
		}
		parts := GPTParts(chunks)
		if len(parts.Tied) != 1 {
			return fmt.Errorf("stage %d: %d tied parameters", mesh.Coord().PP, len(parts.Tied))
		}
		tr, err := New(ctx, mesh, dev, parts, Config{Optim: optim.Config{LR: 1e-2}})
		if err != nil {
			return err
		}
		sched := parallel.OneFOneB{M: 4}
		for step := range 3 {
			pass := func(micro int) *nn.Pass { return PassFor(ctx, mesh, tensor.NewRNG(1), step, micro, tinyBatch, 4) }
			if _, err := tr.Step(ctx, sched, GPTForward(chunks, pass, tinyGPTBatch(dev, mesh, step))); err != nil {
				return err
			}
		}
		mu.Lock()
		copies[mesh.Coord().PP] = tensor.ToSlice[float64](parts.Tied[0].Tensor)
		mu.Unlock()
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, copies[0], copies[1])
}

// TestDistributedOptimizerAndOverlap: the distributed optimizer (reduce-scatter, sharded
// step, all-gather), reducing without overlap and all-gathering the parameters during
// the next forward pass give the same training as the plain all-reduce with overlap,
// bit for bit: each is the same element-wise arithmetic.
func TestDistributedOptimizerAndOverlap(t *testing.T) {
	base := layout{tp: 2, pp: 2, dp: 2, sp: true}
	want := train3D(t, base, 4)
	for _, l := range []layout{
		{tp: 2, pp: 2, dp: 2, sp: true, distributed: true},
		{tp: 2, pp: 2, dp: 2, sp: true, noOverlap: true},
		{tp: 2, pp: 2, dp: 2, sp: true, interleaved: true, distributed: true},
		{tp: 2, pp: 2, dp: 2, sp: true, interleaved: true, distributed: true, gather: true},
	} {
		t.Run(l.String(), func(t *testing.T) {
			compareExact(t, want, train3D(t, l, 4))
		})
	}
}

// TestBF16Schedules: with bf16 parameters each micro-batch's gradient is folded into the
// fp32 main gradient on its own, whatever the schedule (the buckets being reduced during
// backward fold their last micro-batch themselves), so pipelining stays bit-identical.
func TestBF16Schedules(t *testing.T) {
	want := train3D(t, layout{tp: 1, pp: 1, dp: 2, bf16: true}, 3)
	for _, l := range []layout{
		{tp: 1, pp: 2, dp: 2, interleaved: true, bf16: true},
		{tp: 1, pp: 4, dp: 2, rec: nn.RecomputeFull, bf16: true},
		{tp: 1, pp: 2, dp: 2, interleaved: true, bf16: true, distributed: true},
	} {
		t.Run(l.String(), func(t *testing.T) {
			compareExact(t, want, train3D(t, l, 3))
		})
	}
}

// TestClippingUnderPipeline: with clipping on (and active: the norms exceed the limit),
// PP=2 and interleaved PP=4 compute the PP=1 gradient norm (summed over the stages) and
// train to the same parameters.
func TestClippingUnderPipeline(t *testing.T) {
	const clip = 0.2
	ref := train3D(t, layout{tp: 1, pp: 1, dp: 1, clip: clip}, 4)
	for _, n := range ref.Norm {
		require.Greater(t, n, clip, "clipping is active")
	}
	for _, l := range []layout{
		{tp: 1, pp: 2, dp: 1, clip: clip},
		{tp: 2, pp: 4, dp: 1, interleaved: true, clip: clip},
	} {
		t.Run(l.String(), func(t *testing.T) {
			got := train3D(t, l, 4)
			// The squared norm is summed per stage, then across stages.
			assert.InDeltaSlice(t, ref.Norm, got.Norm, 1e-12)
			compareTol(t, ref, got)
		})
	}
}

func TestT5RejectsPipeline(t *testing.T) {
	err := parallel.RunLocal(2, func(world parallel.Comm) error {
		ctx := context.Background()
		mesh, err := parallel.NewMesh(ctx, world, parallel.Sizes{PP: 2})
		if err != nil {
			return err
		}
		b := &nn.Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(1), TP: mesh.TP()}
		_, err = NewT5(b, nn.NewT5Config(2, 16, 4, 4, 24, 100), mesh)
		return err
	})
	require.ErrorContains(t, err, "train: T5 under pipeline parallelism (PP=2) is not supported; run it with TP and DP")
}

// bertBatch is a deterministic BERT micro-batch: tokens, a padded tail, masked-LM labels
// at every third position and a binary label.
func bertBatch(dev *tensor.Device, m *parallel.Mesh, step, micro, mbs, mb int) BERTBatch {
	g0 := step*mbs*mb*m.Sizes().DP + m.SampleOffset(mbs, micro)
	const seq = 8
	ids, att, lab, bin := make([]int64, mbs*seq), make([]int64, mbs*seq), make([]int64, mbs*seq), make([]int64, mbs)
	for b := range mbs {
		g := g0 + b
		bin[b] = int64(g % 2)
		for t := range seq {
			i := b*seq + t
			ids[i], att[i], lab[i] = token(g, t), 1, -100
			if t >= seq-1-g%3 {
				att[i] = 0
			}
			if t%3 == 1 {
				lab[i] = token(g, t+1)
			}
		}
	}
	return BERTBatch{In: nn.BERTInput{IDs: tensor.FromSlice(dev, ids, mbs, seq), Attend: tensor.FromSlice(dev, att, mbs, seq)},
		LMLabels: tensor.FromSlice(dev, lab, mbs, seq), BinaryLabels: tensor.FromSlice(dev, bin, mbs)}
}

// trainBERT trains a tiny BERT (tied MLM head, binary head, dropout) on the layout and
// returns the per-step losses and the first stage's word embedding.
func trainBERT(t *testing.T, tp, pp, chunks int, steps int) ([]float64, []float64) {
	t.Helper()
	cfg := nn.NewBERTConfig(4, 8, 2, tinyVocab, 8)
	cfg.VocabMultiple = 1
	losses := make([]float64, steps)
	var word []float64
	var mu sync.Mutex
	err := parallel.RunLocal(tp*pp, func(world parallel.Comm) error {
		ctx := context.Background()
		mesh, err := parallel.NewMesh(ctx, world, parallel.Sizes{TP: tp, PP: pp})
		if err != nil {
			return err
		}
		dev := tensor.NewCPU()
		b := &nn.Builder{Dev: dev, DType: tensor.F64, RNG: tensor.NewRNG(3), TP: mesh.TP()}
		ms, err := NewBERTChunks(b, cfg, mesh, chunks)
		if err != nil {
			return err
		}
		tr, err := New(ctx, mesh, dev, BERTParts(ms), Config{Optim: optim.Config{LR: 1e-2}})
		if err != nil {
			return err
		}
		const m = 4
		var sched parallel.Schedule = parallel.OneFOneB{M: m}
		if chunks > 1 {
			sched = parallel.Interleaved{M: m, V: chunks}
		}
		for step := range steps {
			pass := func(micro int) *nn.Pass { return PassFor(ctx, mesh, tensor.NewRNG(5), step, micro, 2, m) }
			batch := func(micro int) BERTBatch { return bertBatch(dev, mesh, step, micro, 2, m) }
			res, err := tr.Step(ctx, sched, BERTForward(ms, pass, batch))
			if err != nil {
				return err
			}
			mu.Lock()
			losses[step] = res.Loss
			mu.Unlock()
		}
		if mesh.IsFirstStage() && mesh.Coord().TP == 0 {
			mu.Lock()
			word = tensor.ToSlice[float64](ms[0].Word.Weight.Tensor)
			mu.Unlock()
		}
		return nil
	})
	require.NoError(t, err)
	return losses, word
}

// TestBERTPipeline: a BERT split over 2 stages (1F1B) and over 2 stages × 2 chunks
// (interleaved), with the MLM head's tied embedding on the last stage, trains like one
// rank (within tolerance: the tied gradient is summed across stages in another order).
func TestBERTPipeline(t *testing.T) {
	refLoss, refWord := trainBERT(t, 1, 1, 1, 4)
	for _, tc := range []struct{ tp, pp, v int }{{1, 2, 1}, {2, 2, 2}} {
		t.Run(fmt.Sprintf("tp%d-pp%d-v%d", tc.tp, tc.pp, tc.v), func(t *testing.T) {
			loss, word := trainBERT(t, tc.tp, tc.pp, tc.v, 4)
			assert.InDeltaSlice(t, refLoss, loss, matrixTol)
			assert.InDeltaSlice(t, shard(refWord, tensor.Shape{tinyVocab, 8}, 0, 0, tc.tp), word, matrixTol)
		})
	}
}
