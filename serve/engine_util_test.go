package serve

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// testConfigs are a GPT-2 and a Llama-style (RoPE, GQA, SwiGLU, RMSNorm) model, in
// float32 so the SIMD GEMM runs. The large init spreads the logits out (near-uniform
// logits would make greedy ids insensitive to wrong positions or caches).
func testConfigs() map[string]nn.GPTConfig {
	const initStd = 0.3
	gpt2 := nn.GPTConfig{TransformerConfig: nn.TransformerConfig{NumLayers: 2, Hidden: 32, Heads: 4, Vocab: 100,
		MaxPosition: 64, Bias: true, InitStd: initStd}}
	llama := nn.LlamaConfig(2, 32, 4, 2, 48, 100)
	llama.InitStd = initStd
	return map[string]nn.GPTConfig{"gpt2": gpt2, "llama-gqa": llama}
}

// testModels builds cfg on tp goroutine ranks (LocalTP), each on its own CPU device.
func testModels(t *testing.T, cfg nn.GPTConfig, tp int) []*nn.GPT {
	t.Helper()
	models, release, err := LocalTP(tp, func(c parallel.Comm) (*nn.GPT, error) {
		b := &nn.Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(7), TP: c}
		return nn.NewGPT(b, cfg, nn.Stage{})
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, release()) })
	return models
}

// testEngine starts an engine over models, closed at the end of the test.
func testEngine(t *testing.T, models []*nn.GPT, cfg EngineConfig) *Engine {
	t.Helper()
	e, err := NewEngine(models, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	return e
}

// result is everything a request's stream delivered.
type result struct {
	ids       []int32
	logprobs  []float32
	top       [][]TokenLogprob
	prompt    []float32
	promptTop [][]TokenLogprob
	done      Event
}

// collect reads a stream to its end. It fails the test if the stream stalls.
func collect(t *testing.T, ch <-chan Event) result {
	t.Helper()
	var r result
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				require.True(t, r.done.Done, "stream closed without a Done event")
				return r
			}
			switch {
			case ev.Done:
				r.done = ev
			case ev.Token != nil:
				r.ids = append(r.ids, ev.Token.ID)
				r.logprobs = append(r.logprobs, ev.Token.Logprob)
				r.top = append(r.top, ev.Token.Top)
			default:
				r.prompt, r.promptTop = ev.PromptLogprobs, ev.PromptTopLogprobs
			}
		case <-timeout:
			t.Fatal("stream stalled")
		}
	}
}

// submitAll submits every request at once and collects their results.
func submitAll(t *testing.T, e *Engine, reqs []Request) []result {
	t.Helper()
	chans := make([]<-chan Event, len(reqs))
	for i, r := range reqs {
		ch, err := e.Submit(context.Background(), r)
		require.NoError(t, err, "request %d", i)
		chans[i] = ch
	}
	out := make([]result, len(reqs))
	for i, ch := range chans {
		out[i] = collect(t, ch)
	}
	return out
}

// variedPrompts returns n prompts of lengths 1..maxLen drawn with seed, ids below vocab.
func variedPrompts(n, maxLen, vocab int, seed uint64) [][]int32 {
	r := rand.New(rand.NewPCG(seed, 1))
	ps := make([][]int32, n)
	for i := range ps {
		ps[i] = make([]int32, 1+r.IntN(maxLen))
		for j := range ps[i] {
			ps[i][j] = int32(r.IntN(vocab))
		}
	}
	return ps
}

// logSoftmaxRows returns log softmax of m's logits over tokens [T], a full forward
// without cache: [T][V].
func logSoftmaxRows(m *nn.GPT, tokens []int32) [][]float64 {
	dev := m.Word.Weight.Device()
	var logits []float64 // [T, Vp]
	dev.NoGrad(func() {
		out := m.Forward(nn.Eval(context.Background()), tensor.FromSlice(dev, tokens, 1, len(tokens)), nil)
		logits = tensor.ToSlice[float64](out)
	})
	rows := make([][]float64, len(tokens))
	for i := range rows {
		row := logits[i*m.Vp : i*m.Vp+m.Config.Vocab]
		mx := math.Inf(-1)
		for _, x := range row {
			mx = max(mx, x)
		}
		s := 0.0
		for _, x := range row {
			s += math.Exp(x - mx)
		}
		rows[i] = make([]float64, len(row))
		for j, x := range row {
			rows[i][j] = x - mx - math.Log(s)
		}
	}
	return rows
}
