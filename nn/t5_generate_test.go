package nn

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/parallel"
	"megago/tensor"
)

// t5GenConfig is a small T5 (2 encoder, 2 decoder layers, V 100 → Vp 128·tp, so padded
// columns are exercised) with genInitStd-sized weights, for peaked attention and spread
// logits: with near-uniform attention a wrong position, bias or cache would hardly move a
// token.
func t5GenConfig() T5Config {
	cfg := NewT5Config(2, 16, 4, 4, 24, 100)
	cfg.InitStd = 0.3
	return cfg
}

// t5GenInputs are three encoder inputs of different lengths (one padded batch).
var t5GenInputs = [][]int32{{3, 17, 2, 99, 42, 7}, {8, 77}, {5, 0, 64, 64, 1}}

// t5Reference is the slow reference: each input alone, the encoder and then the whole
// decoder prefix run again (T5.Decode, no cache) for every new token, greedily. It
// returns the tokens and each step's logits over the true vocabulary.
func t5Reference(m *T5, input []int32, start int32, steps int) (toks []int32, logits [][]float64) {
	p := Eval(context.Background())
	dev := m.Word.Weight.Device()
	dev.NoGrad(func() {
		mem := m.Encode(p, tensor.FromSlice(dev, input, 1, len(input)), nil) // [1, Te, C]
		seq := []int32{start}
		for range steps {
			t := len(seq)
			out := m.Decode(p, tensor.FromSlice(dev, seq, 1, t), nil, mem, nil)                               // [1, T, Vp/tp]
			full := tensor.ToSlice[float64](parallel.GatherFromTP(p.Ctx, m.region.tp, out.Narrow(1, t-1, 1))) // [1, 1, Vp]
			row := append([]float64(nil), vocabRows(full, 1, m.Config.Vocab)[0]...)
			tok := int32(argmax(row))
			logits, toks, seq = append(logits, row), append(toks, tok), append(seq, tok)
		}
	})
	return toks, logits
}

// t5Cached decodes inputs greedily with T5Decoding, returning each input's tokens and
// per-step logits.
func t5Cached(m *T5, inputs [][]int32, start int32, steps int) ([][]int32, [][][]float64, error) {
	d, err := NewT5Decoding(context.Background(), m, inputs)
	if err != nil {
		return nil, nil, err
	}
	defer d.Close()
	toks, logits := make([][]int32, len(inputs)), make([][][]float64, len(inputs))
	ids := make([]int32, len(inputs))
	for i := range ids {
		ids[i] = start
	}
	for range steps {
		rows, err := d.Next(ids)
		if err != nil {
			return nil, nil, err
		}
		for i, row := range rows {
			ids[i] = int32(argmax(row))
			toks[i] = append(toks[i], ids[i])
			logits[i] = append(logits[i], row)
		}
	}
	return toks, logits, nil
}

func TestT5DecodingMatchesRecompute(t *testing.T) {
	const steps, start = 6, 0
	// The padded batch and the one-row reference sum the same products in a different
	// blocking; the cache adds nothing of its own (float64 throughout).
	const tol = 1e-10
	var tp1 [][]int32
	for _, tp := range []int{1, 2} {
		t.Run(fmt.Sprintf("tp%d", tp), func(t *testing.T) {
			var mu sync.Mutex
			got := make([][][]int32, tp)
			err := parallel.RunLocal(tp, func(c parallel.Comm) error {
				m, err := NewT5(testBuilder(c, false), t5GenConfig(), Stage{})
				if err != nil {
					return err
				}
				toks, logits, err := t5Cached(m, t5GenInputs, start, steps)
				if err != nil {
					return err
				}
				gen, err := GenerateT5(context.Background(), m, t5GenInputs, T5GenerateOptions{GenerateOptions: GenerateOptions{MaxNewTokens: steps}, DecoderStart: start})
				if err != nil {
					return err
				}
				for i, in := range t5GenInputs {
					wantToks, wantLogits := t5Reference(m, in, start, steps)
					if fmt.Sprint(wantToks) != fmt.Sprint(toks[i]) || fmt.Sprint(gen[i]) != fmt.Sprint(toks[i]) {
						return fmt.Errorf("rank %d input %d: cached %v, GenerateT5 %v, recomputed %v", c.Rank(), i, toks[i], gen[i], wantToks)
					}
					for s := range steps {
						for j, w := range wantLogits[s] {
							if d := logits[i][s][j] - w; d > tol || d < -tol {
								return fmt.Errorf("rank %d input %d step %d token %d: logit %v, recomputed %v", c.Rank(), i, s, j, logits[i][s][j], w)
							}
						}
					}
				}
				mu.Lock()
				got[c.Rank()] = toks
				mu.Unlock()
				return nil
			})
			require.NoError(t, err)
			for r := range got {
				require.Equal(t, got[0], got[r], "rank %d vs rank 0", r)
			}
			if tp == 1 {
				tp1 = got[0]
			}
			require.Equal(t, tp1, got[0], "tp %d vs tp 1", tp)
			// The test is void if every row repeats one token.
			distinct := map[int32]bool{}
			for _, toks := range got[0] {
				for _, tok := range toks {
					distinct[tok] = true
				}
			}
			require.Greater(t, len(distinct), 2, "tokens %v", got[0])
		})
	}
}

func TestGenerateT5StopsAtEOS(t *testing.T) {
	m, err := NewT5(testBuilder(parallel.Self(), false), t5GenConfig(), Stage{})
	require.NoError(t, err)
	o := T5GenerateOptions{GenerateOptions: GenerateOptions{MaxNewTokens: 8}}
	full, err := GenerateT5(context.Background(), m, t5GenInputs, o)
	require.NoError(t, err)
	o.EOD = []int32{full[0][2]}
	got, err := GenerateT5(context.Background(), m, t5GenInputs, o)
	require.NoError(t, err)
	for i, toks := range full {
		want := toks
		for j, tok := range toks {
			if tok == o.EOD[0] {
				want = toks[:j+1]
				break
			}
		}
		require.Equal(t, want, got[i], "input %d", i)
	}
	require.LessOrEqual(t, len(got[0]), 3)
}

func TestT5DecodingFreesStorage(t *testing.T) {
	m, err := NewT5(testBuilder(parallel.Self(), false), t5GenConfig(), Stage{})
	require.NoError(t, err)
	dev := m.Word.Weight.Device()
	before := dev.Stats()
	_, err = GenerateT5(context.Background(), m, t5GenInputs, T5GenerateOptions{GenerateOptions: GenerateOptions{MaxNewTokens: 4}})
	require.NoError(t, err)
	require.Equal(t, before.InUse, dev.Stats().InUse, "storage still in use after GenerateT5")
}

func TestT5DecodingErrors(t *testing.T) {
	cfg := t5GenConfig()
	m, err := NewT5(testBuilder(parallel.Self(), false), cfg, Stage{})
	require.NoError(t, err)
	spModel, err := NewT5(testBuilder(parallel.Self(), true), cfg, Stage{})
	require.NoError(t, err)
	ok := T5GenerateOptions{GenerateOptions: GenerateOptions{MaxNewTokens: 2}}
	for _, tc := range []struct {
		name   string
		m      *T5
		inputs [][]int32
		o      T5GenerateOptions
		want   string
	}{
		{"no new tokens", m, t5GenInputs, T5GenerateOptions{}, "MaxNewTokens = 0"},
		{"bad start", m, t5GenInputs, T5GenerateOptions{GenerateOptions: ok.GenerateOptions, DecoderStart: 100}, "DecoderStart 100 outside [0, 100)"},
		{"no inputs", m, nil, ok, "no inputs"},
		{"empty input", m, [][]int32{{1}, {}}, ok, "input 1 is empty"},
		{"id too large", m, [][]int32{{1, 100}}, ok, "input 0 token 1: id 100 outside [0, 100)"},
		{"sequence parallel", spModel, t5GenInputs, ok, "sequence parallelism"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := GenerateT5(context.Background(), tc.m, tc.inputs, tc.o)
			require.ErrorContains(t, err, tc.want)
		})
	}
	d, err := NewT5Decoding(context.Background(), m, t5GenInputs)
	require.NoError(t, err)
	defer d.Close()
	_, err = d.Next([]int32{0})
	require.ErrorContains(t, err, "1 ids for 3 rows")
	_, err = d.Next([]int32{0, 0, -1})
	require.ErrorContains(t, err, "row 2: id -1 outside [0, 100)")
}
