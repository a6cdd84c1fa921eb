package nn

import (
	"context"
	"errors"
	"fmt"

	"megago/parallel"
	"megago/tensor"
)

// Generate continues each prompt (token ids) with up to o.MaxNewTokens tokens from the
// GPT m and returns the new tokens of each prompt, ending with an EOD id if one stopped
// it. It runs the model in inference mode (no dropout, no gradients) with a KV cache per
// layer: the prompt is run once (prefill) and then one token at a time.
//
// Under tensor parallelism every rank of m's TP group must call Generate with the same
// prompts and options: each rank's logits [B, 1, Vp/tp] are all-gathered, the padded
// columns (ids ≥ V) dropped, and every rank chooses the same token from the same bytes
// with the same random number (see GenerateOptions.Seed). Results are identical across
// ranks and, up to floating-point reordering of the model's sums, across TP sizes.
//
// Prompts of equal length run as one batch [B, T]; prompts of different lengths run as
// one batch per length, so no padding or attention mask is needed. A sequence that has
// ended keeps its row in the batch until every row has ended.
//
// m must be a whole model (not a pipeline stage) built without sequence parallelism (a
// model's parameters are the same with and without it: build an inference copy and
// LoadGlobal its parameters). Generate returns an error for invalid options, an empty
// prompt, an id outside [0, V), more positions than MaxPosition with learned positions,
// non-finite logits, a cancelled ctx, or a failed collective.
func Generate(ctx context.Context, m *GPT, prompts [][]int32, o GenerateOptions) ([][]int32, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if err := checkGenerate(m, prompts, o); err != nil {
		return nil, err
	}
	out := make([][]int32, len(prompts))
	for _, rows := range rowsByLength(prompts) {
		g := &generator{m: m, p: Eval(ctx), o: o, prompts: prompts, rows: rows, out: out}
		if err := g.run(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// checkGenerate returns an error if m or prompts cannot be generated from with o.
func checkGenerate(m *GPT, prompts [][]int32, o GenerateOptions) error {
	if !m.Stage.PreProcess || !m.Stage.PostProcess {
		return errors.New("nn: Generate: pipeline-parallel generation is not implemented (m is a pipeline stage)")
	}
	if m.region.sp {
		return errors.New("nn: Generate: m was built with sequence parallelism; build it without for inference (same parameters)")
	}
	v := m.Config.Vocab
	for i, pr := range prompts {
		if len(pr) == 0 {
			return fmt.Errorf("nn: Generate: prompt %d is empty", i)
		}
		for j, id := range pr {
			if id < 0 || int(id) >= v {
				return fmt.Errorf("nn: Generate: prompt %d token %d: id %d outside [0, %d)", i, j, id, v)
			}
		}
		// The last new token is returned, never fed back.
		if n := len(pr) + o.MaxNewTokens - 1; m.Position != nil && n > m.Config.MaxPosition {
			return fmt.Errorf("nn: Generate: prompt %d: %d prompt + %d new tokens need %d positions, MaxPosition is %d",
				i, len(pr), o.MaxNewTokens, n, m.Config.MaxPosition)
		}
	}
	return nil
}

// rowsByLength groups prompt indices by prompt length, in order of first appearance.
func rowsByLength(prompts [][]int32) [][]int {
	var groups [][]int
	at := map[int]int{}
	for i, pr := range prompts {
		g, ok := at[len(pr)]
		if !ok {
			g = len(groups)
			at[len(pr)] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// generator generates for one batch of equal-length prompts.
type generator struct {
	m       *GPT
	p       *Pass
	o       GenerateOptions
	prompts [][]int32
	rows    []int     // indices into prompts of this batch's rows
	out     [][]int32 // results, indexed like prompts
}

// run prefills the batch's prompts and generates until every row has ended. A failed
// collective (which the TP mappings report by panicking with a *parallel.Error) is
// returned as an error; the caches are released either way.
func (g *generator) run() (err error) {
	dev := g.m.Word.Weight.Device()
	caches := make([]*KVCache, len(g.m.Block.Layers))
	for i := range caches {
		caches[i] = &KVCache{}
	}
	defer func() {
		for _, c := range caches {
			c.release()
		}
	}()
	defer recoverCommErrorAs("Generate", &err)

	b, t := len(g.rows), len(g.prompts[g.rows[0]])
	ids := make([]int32, 0, b*t) // [B, T], then [B, 1]
	for _, r := range g.rows {
		ids = append(ids, g.prompts[r]...)
	}
	ended := make([]bool, b)
	dev.NoGrad(func() {
		for step := 0; step < g.o.MaxNewTokens; step++ {
			if err = g.p.Ctx.Err(); err != nil {
				err = fmt.Errorf("nn: Generate: step %d: %w", step, err)
				return
			}
			logits := lastLogits(g.p, g.m, ids, b, caches) // [B][V]
			ids = ids[:b]
			live := false
			for i, r := range g.rows {
				if ended[i] {
					continue // keep feeding its last token
				}
				tok, e := nextToken(logits[i], g.o, g.o.uniform(step, r))
				if e != nil {
					err = fmt.Errorf("nn: Generate: prompt %d step %d: %w", r, step, e)
					return
				}
				g.out[r] = append(g.out[r], tok)
				ids[i] = tok
				ended[i] = isEOD(tok, g.o.EOD)
				live = live || !ended[i]
			}
			if !live {
				return
			}
		}
	})
	return err
}

// lastLogits runs m on the b rows of ids [B, T] (with caches, which it extends, or nil to
// run the whole sequence) and returns the logits of the last position over the true
// vocabulary, [B][V], the same on every TP rank: Forward's, bit for bit, with the final
// norm and the output layer run on the last position alone (a prompt's other positions
// would cost T−1 times the output layer's V·C multiply-adds). Tensors it creates are
// freed before it returns, except what the caches keep.
func lastLogits(p *Pass, m *GPT, ids []int32, b int, caches []*KVCache) [][]float64 {
	dev := m.Word.Weight.Device()
	s := dev.NewScope()
	defer s.Close()
	t := len(ids) / b
	x := m.hidden(p, tensor.FromSlice(dev, ids, b, t), Documents{}, caches)          // [B, T, C]
	last := m.last(m, p, x.Narrow(1, t-1, 1))                                        // [B, 1, Vp/tp]
	full := tensor.ToSlice[float64](parallel.GatherFromTP(p.Ctx, m.region.tp, last)) // [B, 1, Vp]
	vp, v := len(full)/b, m.Config.Vocab
	rows := make([][]float64, b)
	for i := range rows {
		rows[i] = full[i*vp : i*vp+v : i*vp+v] // drop the padded columns
	}
	return rows
}

func isEOD(tok int32, eod []int32) bool {
	for _, e := range eod {
		if tok == e {
			return true
		}
	}
	return false
}

// release frees the cache's tensors and empties it.
func (c *KVCache) release() {
	if c.K != nil {
		c.K.Release()
		c.V.Release()
	}
	c.K, c.V = nil, nil
}
