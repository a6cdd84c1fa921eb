package nn

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/internal/golden"
	"megago/parallel"
	"megago/tensor"
)

// hfModel is a model with a Hugging Face mapping.
type hfModel interface {
	Module
	HFConverter
}

// rankStep is one rank's forward pass in a test: it returns this rank's logits
// [B, T, Vp/tp], the loss, and named extra outputs (whole on every rank).
type rankStep func(p *Pass, m hfModel) (logits, loss *tensor.Tensor, extra map[string]*tensor.Tensor)

// rankRun is what a test run gives: the full logits, the loss, the extra outputs (rank 0's)
// and each rank's parameters with their gradients.
type rankRun struct {
	model  hfModel // rank 0's
	logits *tensor.Tensor
	loss   float64
	extra  map[string]*tensor.Tensor
	params [][]*Param               // per rank
	fused  map[tensor.FusedOp]int64 // forward calls of each fused op, all ranks
}

// runRanks builds a model on each of tp goroutine ranks with build, loads global
// parameters into it when global is not nil, runs step and backward, and reduces
// sequence-parallel gradients.
func runRanks(t *testing.T, tp int, sp bool, pass func() *Pass, dt tensor.DType,
	build func(b *Builder) (hfModel, error), global func(m hfModel) (map[string]*tensor.Tensor, error), step rankStep) rankRun {
	t.Helper()
	var mu sync.Mutex
	run := rankRun{params: make([][]*Param, tp), fused: map[tensor.FusedOp]int64{}}
	err := parallel.RunLocal(tp, func(c parallel.Comm) error {
		b := &Builder{Dev: tensor.NewCPU(), DType: dt, RNG: tensor.NewRNG(7), TP: c, SequenceParallel: sp}
		m, err := build(b)
		if err != nil {
			return err
		}
		if global != nil {
			g, err := global(m)
			if err != nil {
				return err
			}
			if err := LoadGlobal(m.Params(), g); err != nil {
				return err
			}
		}
		p := pass()
		logits, loss, extra := step(p, m)
		loss.Backward()
		if err := ReduceSequenceParallelGrads(p.Ctx, c, m.Params()); err != nil {
			return err
		}
		full := parallel.GatherFromTP(p.Ctx, c, logits.Detach())
		mu.Lock()
		defer mu.Unlock()
		run.params[c.Rank()] = m.Params()
		for op := tensor.FusedAttention; op <= tensor.FusedRoPE; op++ {
			run.fused[op] += b.Dev.FusedCount(op)
		}
		if c.Rank() == 0 {
			run.model, run.logits, run.loss, run.extra = m, full, loss.Item(), extra
		}
		return nil
	})
	require.NoError(t, err)
	return run
}

// globalGrads assembles each parameter's global gradient from the ranks' shards (TP-split
// parameters concatenated along their partition dim in rank order; replicated ones from
// rank 0).
func globalGrads(t *testing.T, params [][]*Param) map[string]*tensor.Tensor {
	t.Helper()
	out := map[string]*tensor.Tensor{}
	for i, p := range params[0] {
		require.NotNil(t, p.Grad(), "no gradient for %s", p.Name)
		if p.PartitionDim < 0 {
			out[p.Name] = p.Grad()
			continue
		}
		shards := make([]*tensor.Tensor, len(params))
		for r := range params {
			shards[r] = params[r][i].Grad().To(p.Device()) // each rank has its own device
		}
		out[p.Name] = tensor.Concat(p.PartitionDim, shards...)
		require.True(t, out[p.Name].Shape().Equal(p.GlobalShape), p.Name)
	}
	return out
}

// checkGolden compares a run with a golden file: logits (vocabulary padding dropped), loss
// and every parameter gradient, converted to Hugging Face names by the model's ToHF.
func checkGolden(t *testing.T, f *golden.File, run rankRun, vocab int) {
	t.Helper()
	requireClose(t, "logits", narrowLast(run.logits, vocab), f.Logits.Data)
	requireClose(t, "loss", []float64{run.loss}, []float32{float32(f.Loss)})
	for name, x := range run.extra {
		requireClose(t, name, tensor.ToSlice[float64](x.Detach()), f.Output(name).Data)
	}
	hf, err := run.model.ToHF(globalGrads(t, run.params))
	require.NoError(t, err)
	require.Len(t, hf, len(f.Grads), "Hugging Face tensors")
	for _, name := range f.ParamNames {
		g, ok := hf[name]
		require.True(t, ok, "no gradient for %s", name)
		requireClose(t, "grad "+name, tensor.ToSlice[float64](g), f.Grad(name).Data)
	}
}

func goldenBERTConfig(f *golden.File) BERTConfig {
	cfg := NewBERTConfig(f.ConfigInt("num_hidden_layers"), f.ConfigInt("hidden_size"), f.ConfigInt("num_attention_heads"),
		f.ConfigInt("vocab_size"), f.ConfigInt("max_position_embeddings"))
	cfg.FFNHidden = f.ConfigInt("intermediate_size")
	cfg.TypeVocab = f.ConfigInt("type_vocab_size")
	cfg.NormEps = f.ConfigFloat("layer_norm_eps")
	cfg.Dropout, cfg.AttnDropout = f.ConfigFloat("hidden_dropout_prob"), f.ConfigFloat("attention_probs_dropout_prob")
	return cfg
}

// TestBERTGolden loads the BertForPreTraining of testdata/golden/bert.json (PyTorch, by
// gen.py) through FromHF, at TP=1 and TP=2, and matches PyTorch's MLM logits, loss (MLM +
// next sentence), pooled output, binary logits and every parameter gradient.
func TestBERTGolden(t *testing.T) {
	f, err := golden.Load("testdata/golden/bert.json")
	require.NoError(t, err)
	require.Equal(t, "gelu", f.ConfigString("hidden_act"))
	cfg := goldenBERTConfig(f)
	for _, tc := range testGrid(opsVariants, []int{1, 2}) {
		t.Run(fmt.Sprintf("%s/tp%d", tc.ops.name, tc.tp), func(t *testing.T) {
			run := runRanks(t, tc.tp, false, func() *Pass { return Eval(context.Background()) }, tensor.F32,
				func(b *Builder) (hfModel, error) { b.Unfused = tc.ops.unfused; return NewBERT(b, cfg, Stage{}) },
				func(m hfModel) (map[string]*tensor.Tensor, error) {
					return m.FromHF(goldenParams(m.Params()[0].Device(), f))
				},
				func(p *Pass, mm hfModel) (*tensor.Tensor, *tensor.Tensor, map[string]*tensor.Tensor) {
					m := mm.(*BERT)
					dev := m.Word.Weight.Device()
					out := m.Forward(p, BERTInput{IDs: goldenInts(dev, f.Input("input_ids")),
						TokenTypes: goldenInts(dev, f.Input("token_type_ids")), Attend: goldenInts(dev, f.Input("attention_mask"))})
					total, lm, binary := m.Loss(p, out, goldenInts(dev, f.Input("masked_lm_labels")), goldenInts(dev, f.Input("next_sentence_label")))
					return out.LMLogits, total, map[string]*tensor.Tensor{"pooler_output": out.Pooled,
						"seq_relationship_logits": out.BinaryLogits, "mlm_loss": lm, "nsp_loss": binary, "last_hidden_state": out.Hidden}
				})
			checkGolden(t, f, run, cfg.Vocab)
			requireFusedRan(t, run, tc.ops.unfused, tensor.FusedAttention, tensor.FusedAddNorm, tensor.FusedBiasGeLU, tensor.FusedBiasDropoutAdd)
		})
	}
}
