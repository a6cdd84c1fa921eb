package nn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/parallel"
	"megago/tensor"
)

// genConfigs are a GPT-2 and a Llama-style (RoPE, GQA, SwiGLU, RMSNorm) model. Both keep
// the default vocabulary padding (V 100 → Vp 128·tp), so padded columns are exercised.
// genInitStd is far above the usual 0.02 so that attention is peaked and the logits spread
// out: with near-uniform attention a wrong position or cache would hardly move a token.
func genConfigs() map[string]GPTConfig {
	const genInitStd = 0.3
	gpt2 := GPTConfig{TransformerConfig: TransformerConfig{NumLayers: 2, Hidden: 16, Heads: 4, Vocab: 100,
		MaxPosition: 16, Bias: true, InitStd: genInitStd}}
	llama := LlamaConfig(2, 16, 4, 2, 24, 100)
	llama.InitStd = genInitStd
	return map[string]GPTConfig{"gpt2": gpt2, "llama-gqa": llama}
}

// genPrompts has two prompts of one length and one of another (two batches).
var genPrompts = [][]int32{{3, 17, 2, 99, 42}, {8, 77}, {5, 0, 64, 64, 1}}

// recomputeGenerate is the slow reference: each prompt alone, the whole sequence run
// again (no KV cache) for every new token.
func recomputeGenerate(m *GPT, prompts [][]int32, o GenerateOptions) [][]int32 {
	p := Eval(context.Background())
	out := make([][]int32, len(prompts))
	m.Word.Weight.Device().NoGrad(func() {
		for i, pr := range prompts {
			seq := append([]int32(nil), pr...)
			for step := 0; step < o.MaxNewTokens; step++ {
				tok, err := nextToken(lastLogits(p, m, seq, 1, nil)[0], o, o.uniform(step, i))
				if err != nil {
					panic(err) // the reference's logits are finite
				}
				out[i] = append(out[i], tok)
				seq = append(seq, tok)
				if isEOD(tok, o.EOD) {
					break
				}
			}
		}
	})
	return out
}

// generateOnRanks builds cfg on tp goroutine ranks and returns, per rank, Generate's tokens
// and (with ref) the recomputed reference's.
func generateOnRanks(t *testing.T, cfg GPTConfig, tp int, prompts [][]int32, o GenerateOptions, ref bool) (got, want [][][]int32) {
	t.Helper()
	got, want = make([][][]int32, tp), make([][][]int32, tp)
	var mu sync.Mutex
	err := parallel.RunLocal(tp, func(c parallel.Comm) error {
		m, err := NewGPT(testBuilder(c, false), cfg, Stage{})
		if err != nil {
			return err
		}
		g, err := Generate(context.Background(), m, prompts, o)
		if err != nil {
			return err
		}
		var w [][]int32
		if ref {
			w = recomputeGenerate(m, prompts, o)
		}
		mu.Lock()
		got[c.Rank()], want[c.Rank()] = g, w
		mu.Unlock()
		return nil
	})
	require.NoError(t, err)
	return got, want
}

func TestGenerateMatchesRecompute(t *testing.T) {
	opts := map[string]GenerateOptions{
		"greedy":       {MaxNewTokens: 6},
		"sample":       {MaxNewTokens: 6, Temperature: 1.3, Seed: 11},
		"sample-top-k": {MaxNewTokens: 6, Temperature: 0.8, TopK: 20, Seed: 5},
		"sample-top-p": {MaxNewTokens: 6, Temperature: 0.9, TopK: 50, TopP: 0.9, Seed: 6},
	}
	for cname, cfg := range genConfigs() {
		for oname, o := range opts {
			t.Run(cname+"/"+oname, func(t *testing.T) {
				var tp1 [][]int32
				for _, tp := range []int{1, 2} {
					got, want := generateOnRanks(t, cfg, tp, genPrompts, o, true)
					for r := range got {
						require.Equal(t, want[r], got[r], "tp %d rank %d: KV cache vs recompute", tp, r)
						require.Equal(t, got[0], got[r], "tp %d rank %d vs rank 0", tp, r)
						for i, toks := range got[r] {
							require.Len(t, toks, o.MaxNewTokens, "prompt %d", i)
						}
					}
					if tp == 1 {
						tp1 = got[0]
					}
					require.Equal(t, tp1, got[0], "tp %d vs tp 1", tp)
				}
			})
		}
	}
}

func TestGenerateGreedyLimits(t *testing.T) {
	cfg := genConfigs()["llama-gqa"]
	greedy, _ := generateOnRanks(t, cfg, 1, genPrompts, GenerateOptions{MaxNewTokens: 5}, false)
	for name, o := range map[string]GenerateOptions{
		"top-k 1":          {MaxNewTokens: 5, Temperature: 1, TopK: 1, Seed: 1},
		"tiny top-p":       {MaxNewTokens: 5, Temperature: 1, TopP: 1e-9, Seed: 2},
		"tiny temperature": {MaxNewTokens: 5, Temperature: 1e-9, Seed: 3},
	} {
		t.Run(name, func(t *testing.T) {
			got, _ := generateOnRanks(t, cfg, 2, genPrompts, o, false)
			require.Equal(t, greedy[0], got[0])
		})
	}
	t.Run("sampling differs", func(t *testing.T) {
		// A near-uniform small model: full-vocabulary sampling must not reproduce greedy.
		got, _ := generateOnRanks(t, cfg, 1, genPrompts, GenerateOptions{MaxNewTokens: 5, Temperature: 1, Seed: 4}, false)
		require.NotEqual(t, greedy[0], got[0])
	})
}

func TestGenerateStopsAtEOD(t *testing.T) {
	cfg := genConfigs()["gpt2"]
	o := GenerateOptions{MaxNewTokens: 8, Temperature: 1, Seed: 9}
	full, _ := generateOnRanks(t, cfg, 1, genPrompts, o, false)
	o.EOD = []int32{full[0][0][3], 1000} // the 4th token of prompt 0; 1000 never occurs
	got, want := generateOnRanks(t, cfg, 2, genPrompts, o, true)
	require.Equal(t, want[0], got[0])
	for i, toks := range full[0] {
		exp := toks
		for j, tok := range toks {
			if tok == o.EOD[0] {
				exp = toks[:j+1]
				break
			}
		}
		require.Equal(t, exp, got[1][i], "prompt %d", i)
	}
	require.LessOrEqual(t, len(got[0][0]), 4)
}

func TestGenerateDropsPaddedVocab(t *testing.T) {
	cfg := genConfigs()["gpt2"]
	cfg.Untied = true
	o := GenerateOptions{MaxNewTokens: 4}
	plain, _ := generateOnRanks(t, cfg, 1, genPrompts, o, false)
	for _, tp := range []int{1, 2} {
		var mu sync.Mutex
		got := make([][][]int32, tp)
		err := parallel.RunLocal(tp, func(c parallel.Comm) error {
			m, err := NewGPT(testBuilder(c, false), cfg, Stage{})
			if err != nil {
				return err
			}
			// Padded output rows ±1000·e₀ give some padded id a logit far above the rest.
			w := m.Output.Weight
			vals := tensor.ToSlice[float64](w.Tensor)
			rows, cols, start := w.Dim(0), w.Dim(1), w.Start()[0]
			for r := 0; r < rows; r++ {
				if id := start + r; id >= cfg.Vocab {
					clear(vals[r*cols : (r+1)*cols])
					vals[r*cols] = 1000 * float64(1-2*(id%2))
				}
			}
			w.Tensor.CopyFrom(tensor.FromSlice(w.Device(), vals, rows, cols))
			g, err := Generate(context.Background(), m, genPrompts, o)
			mu.Lock()
			got[c.Rank()] = g
			mu.Unlock()
			return err
		})
		require.NoError(t, err)
		for r := range got {
			require.Equal(t, plain[0], got[r], "tp %d rank %d", tp, r)
		}
	}
}

func TestGenerateFreesStorage(t *testing.T) {
	m, err := NewGPT(testBuilder(parallel.Self(), false), genConfigs()["llama-gqa"], Stage{})
	require.NoError(t, err)
	dev := m.Word.Weight.Device()
	before := dev.Stats()
	_, err = Generate(context.Background(), m, genPrompts, GenerateOptions{MaxNewTokens: 4, Temperature: 1})
	require.NoError(t, err)
	first := dev.Stats()
	require.Equal(t, before.InUse, first.InUse, "storage still in use after Generate")
	_, err = Generate(context.Background(), m, genPrompts, GenerateOptions{MaxNewTokens: 4, Temperature: 1})
	require.NoError(t, err)
	require.Equal(t, first.Fresh, dev.Stats().Fresh, "a second call should reuse pooled storage")
}

func TestGenerateErrors(t *testing.T) {
	cfg := genConfigs()["gpt2"]
	m, err := NewGPT(testBuilder(parallel.Self(), false), cfg, Stage{})
	require.NoError(t, err)
	spModel, err := NewGPT(testBuilder(parallel.Self(), true), cfg, Stage{})
	require.NoError(t, err)
	stage, err := NewGPT(testBuilder(parallel.Self(), false), cfg, Stage{PreProcess: true, NumLayers: 1})
	require.NoError(t, err)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	ok := GenerateOptions{MaxNewTokens: 2}
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		m       *GPT
		prompts [][]int32
		o       GenerateOptions
		want    []string
	}{
		{"no new tokens", nil, m, genPrompts, GenerateOptions{}, []string{"MaxNewTokens = 0"}},
		{"bad options", nil, m, genPrompts, GenerateOptions{MaxNewTokens: 1, Temperature: -1, TopK: -2, TopP: 1.5},
			[]string{"Temperature = -1", "TopK = -2", "TopP = 1.5"}},
		{"NaN temperature", nil, m, genPrompts, GenerateOptions{MaxNewTokens: 1, Temperature: math.NaN()}, []string{"Temperature = NaN"}},
		{"empty prompt", nil, m, [][]int32{{1}, {}}, ok, []string{"prompt 1 is empty"}},
		{"id too large", nil, m, [][]int32{{1, 100}}, ok, []string{"prompt 0 token 1: id 100 outside [0, 100)"}},
		{"negative id", nil, m, [][]int32{{-1}}, ok, []string{"id -1"}},
		{"positions", nil, m, [][]int32{make([]int32, 10)}, GenerateOptions{MaxNewTokens: 8}, []string{"need 17 positions, MaxPosition is 16"}},
		{"sequence parallel", nil, spModel, genPrompts, ok, []string{"sequence parallelism"}},
		{"pipeline stage", nil, stage, genPrompts, ok, []string{"pipeline"}},
		{"cancelled", cancelled, m, genPrompts, ok, []string{"context canceled"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			_, err := Generate(ctx, tc.m, tc.prompts, tc.o)
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestGenerateReportsFailedPeer(t *testing.T) {
	cfg := genConfigs()["gpt2"]
	var genErr error
	err := parallel.RunLocal(2, func(c parallel.Comm) error {
		m, err := NewGPT(testBuilder(c, false), cfg, Stage{})
		if err != nil {
			return err
		}
		if c.Rank() == 1 {
			return errors.New("rank 1 gives up")
		}
		_, genErr = Generate(context.Background(), m, genPrompts, GenerateOptions{MaxNewTokens: 2})
		return nil
	})
	require.ErrorContains(t, err, "rank 1 gives up")
	var pe *parallel.Error
	require.ErrorAs(t, genErr, &pe, "rank 0 should get the collective's error, not a panic")
}

func TestProbabilities(t *testing.T) {
	base := []float64{0.5, 0.3, 0.15, 0.05}
	logits := make([]float64, len(base))
	for i, p := range base {
		logits[i] = math.Log(p) + 3 // softmax is shift invariant
	}
	sqrtSum := 0.0
	for _, p := range base {
		sqrtSum += math.Sqrt(p)
	}
	for _, tc := range []struct {
		name   string
		logits []float64
		o      GenerateOptions
		want   []float64
	}{
		{"softmax", logits, GenerateOptions{Temperature: 1}, base},
		{"temperature 2", logits, GenerateOptions{Temperature: 2}, []float64{
			math.Sqrt(0.5) / sqrtSum, math.Sqrt(0.3) / sqrtSum, math.Sqrt(0.15) / sqrtSum, math.Sqrt(0.05) / sqrtSum}},
		{"top-k 2", logits, GenerateOptions{Temperature: 1, TopK: 2}, []float64{0.625, 0.375, 0, 0}},
		{"top-k ≥ V", logits, GenerateOptions{Temperature: 1, TopK: 9}, base},
		{"top-k keeps ties", []float64{1, 2, 2, 2}, GenerateOptions{Temperature: 1, TopK: 2}, []float64{0, 1.0 / 3, 1.0 / 3, 1.0 / 3}},
		// Kept while the more probable tokens hold < p: 0 (0), 1 (0.5), not 2 (0.8).
		{"top-p 0.7", logits, GenerateOptions{Temperature: 1, TopP: 0.7}, []float64{0.625, 0.375, 0, 0}},
		{"top-p 0.85", logits, GenerateOptions{Temperature: 1, TopP: 0.85}, []float64{0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}},
		{"top-p 1", logits, GenerateOptions{Temperature: 1, TopP: 1}, base},
		// Top-p applies to the renormalized top-k: 0.5/0.95 + 0.3/0.95 = 0.842 ≥ 0.8.
		{"top-k 3 then top-p 0.8", logits, GenerateOptions{Temperature: 1, TopK: 3, TopP: 0.8}, []float64{0.625, 0.375, 0, 0}},
		{"order of ids", []float64{0, math.Log(3), math.Inf(-1), math.Log(2)}, GenerateOptions{Temperature: 1, TopP: 0.6},
			[]float64{0, 0.6, 0, 0.4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.InDeltaSlice(t, tc.want, probabilities(tc.logits, tc.o), 1e-15) // exp/log round-off
		})
	}
}

func TestPick(t *testing.T) {
	p := []float64{0.5, 0, 0.3, 0.15, 0.05}
	for _, tc := range []struct {
		u    float64
		want int
	}{{0, 0}, {0.49, 0}, {0.5, 2}, {0.79, 2}, {0.81, 3}, {0.96, 4}, {math.Nextafter(1, 0), 4}} {
		require.Equal(t, tc.want, pick(p, tc.u), "u = %v", tc.u)
	}
	// Rounding that leaves u above the total picks the last possible token, never a zero one.
	require.Equal(t, 1, pick([]float64{0.3, 0.3, 0}, 0.9))
}

func TestSamplingFrequencies(t *testing.T) {
	// Draws over steps and rows follow the distribution: 20000 draws, each frequency
	// within 5 standard deviations of its probability.
	const steps, rows = 2000, 10
	logits := []float64{math.Log(0.5), math.Log(0.3), math.Log(0.15), math.Log(0.05)}
	o := GenerateOptions{Temperature: 1, Seed: 42}
	counts := make([]float64, len(logits))
	for s := 0; s < steps; s++ {
		for r := 0; r < rows; r++ {
			id, err := nextToken(logits, o, o.uniform(s, r))
			require.NoError(t, err)
			counts[id]++
		}
	}
	n := float64(steps * rows)
	for i, c := range counts {
		p := math.Exp(logits[i])
		require.InDelta(t, p, c/n, 5*math.Sqrt(p*(1-p)/n), "token %d", i)
	}
	// The stream depends on the seed, the step and the row.
	u := o.uniform(3, 1)
	require.NotEqual(t, u, o.uniform(3, 2))
	require.NotEqual(t, u, o.uniform(4, 1))
	require.NotEqual(t, u, GenerateOptions{Seed: 43}.uniform(3, 1))
	require.Equal(t, u, o.uniform(3, 1))
}

func TestCheckLogits(t *testing.T) {
	for name, tc := range map[string]struct {
		logits []float64
		want   string
	}{
		"finite": {[]float64{1, math.Inf(-1), 2}, ""},
		"NaN":    {[]float64{1, math.NaN()}, "token 1 is NaN"},
		"+Inf":   {[]float64{math.Inf(1), 0}, "token 0 is +Inf"},
		"-Inf":   {[]float64{math.Inf(-1), math.Inf(-1)}, "every logit is -Inf"},
	} {
		err := checkLogits(tc.logits)
		if tc.want == "" {
			require.NoError(t, err, name)
		} else {
			require.ErrorContains(t, err, tc.want, name)
		}
	}
}

func TestKVCacheLogitsMatchRecompute(t *testing.T) {
	// Two rows of 8 tokens: prefill 4, then feed one at a time; each step's last logits
	// must equal those of the whole prefix run without a cache.
	seq := []int32{3, 17, 2, 99, 42, 5, 0, 64, 8, 77, 31, 30, 29, 28, 1, 9}
	const b, t0 = 2, 4
	for cname, cfg := range genConfigs() {
		for _, tp := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/tp%d", cname, tp), func(t *testing.T) {
				err := parallel.RunLocal(tp, func(c parallel.Comm) error {
					m, err := NewGPT(testBuilder(c, false), cfg, Stage{})
					if err != nil {
						return err
					}
					p := Eval(context.Background())
					caches := make([]*KVCache, cfg.NumLayers)
					for i := range caches {
						caches[i] = &KVCache{}
					}
					m.Word.Weight.Device().NoGrad(func() {
						for n := t0; n <= len(seq)/b; n++ {
							prefix, step := make([]int32, 0, b*n), make([]int32, 0, b*n)
							for r := 0; r < b; r++ {
								row := seq[r*len(seq)/b:]
								prefix = append(prefix, row[:n]...)
								if n == t0 {
									step = append(step, row[:n]...)
								} else {
									step = append(step, row[n-1])
								}
							}
							want := lastLogits(p, m, prefix, b, nil)
							got := lastLogits(p, m, step, b, caches)
							if caches[0].Len() != n {
								t.Errorf("rank %d: cache holds %d positions, want %d", c.Rank(), caches[0].Len(), n)
							}
							for r := range want {
								// Different matmul shapes reorder float64 sums.
								assertInDeltaSlice(t, want[r], got[r], 1e-12, fmt.Sprintf("rank %d row %d length %d", c.Rank(), r, n))
							}
						}
					})
					return nil
				})
				require.NoError(t, err)
			})
		}
	}
}

// assertInDeltaSlice is require.InDeltaSlice for use off the test goroutine (t.Error).
func assertInDeltaSlice(t *testing.T, want, got []float64, delta float64, what string) {
	t.Helper()
	if len(want) != len(got) {
		t.Errorf("%s: %d values, want %d", what, len(got), len(want))
		return
	}
	for i := range want {
		if math.Abs(want[i]-got[i]) > delta {
			t.Errorf("%s: element %d = %v, want %v", what, i, got[i], want[i])
			return
		}
	}
}

// TestLastLogitsMatchForward: Generate's logits of a batch's last positions (the final
// norm and output layer run on those rows alone) are Forward's at those positions, bit for
// bit, without and with a KV cache holding an earlier part of the prompts.
func TestLastLogitsMatchForward(t *testing.T) {
	for name, cfg := range genConfigs() {
		t.Run(name, func(t *testing.T) {
			dev := tensor.NewCPU()
			m, err := NewGPT(&Builder{Dev: dev, DType: tensor.F32, RNG: tensor.NewRNG(5), TP: parallel.Self()}, cfg, Stage{})
			require.NoError(t, err)
			ids := []int32{3, 17, 2, 99, 42, 8, 77, 5, 0, 64, 64, 1} // [2, 6]
			const b, tt = 2, 6
			p := Eval(context.Background())
			dev.NoGrad(func() {
				full := tensor.ToSlice[float64](m.Forward(p, tensor.FromSlice(dev, ids, b, tt), nil)) // [B, T, Vp]
				for i, row := range lastLogits(p, m, ids, b, nil) {
					at := (i*tt + tt - 1) * m.Vp
					require.Equal(t, full[at:at+cfg.Vocab], row, "row %d", i)
				}
				caches := make([]*KVCache, len(m.Block.Layers))
				for i := range caches {
					caches[i] = &KVCache{}
				}
				defer func() {
					for _, c := range caches {
						c.release()
					}
				}()
				var first, rest []int32 // the prompts' first 4 tokens, then their last 2
				for i := range b {
					first = append(first, ids[i*tt:i*tt+4]...)
					rest = append(rest, ids[i*tt+4:(i+1)*tt]...)
				}
				lastLogits(p, m, first, b, caches)
				for i, row := range lastLogits(p, m, rest, b, caches) {
					at := (i*tt + tt - 1) * m.Vp
					require.Equal(t, full[at:at+cfg.Vocab], row, "row %d after the cache", i)
				}
			})
		})
	}
}
