package nn

import (
	"context"
	"errors"
	"fmt"
	"math"

	"megago/parallel"
	"megago/tensor"
)

// T5Decoding decodes from a T5 one token at a time: NewT5Decoding runs the encoder once
// on a batch of inputs and computes every decoder layer's cross-attention keys and values
// of its output once; each Next runs the decoder on one new token per row, attending to
// the past through a self-attention KV cache per layer. It runs in inference mode (no
// dropout, no gradients). Close releases the caches.
//
// Under tensor parallelism every rank of the model's TP group makes the same calls with
// the same arguments and gets the same logits (all-gathered over the vocabulary).
type T5Decoding struct {
	m     *T5
	p     *Pass
	b     int
	cross AttentionMask // the encoder's padding, [B, 1, 1, Te], or none
	self  []*KVCache    // per decoder layer: [B, NH/tp, Tpast, HS] keys and values
	mem   []*KVCache    // per decoder layer: [B, NH/tp, Te, HS] cross keys and values
}

// NewT5Decoding encodes inputs (one row each; rows of different lengths are padded and
// masked) and prepares decoding. It returns an error for an empty batch or row, an id
// outside [0, V), a model built with sequence parallelism (build an inference copy: the
// parameters are the same), or a failed collective.
func NewT5Decoding(ctx context.Context, m *T5, inputs [][]int32) (d *T5Decoding, err error) {
	if err := checkT5Inputs(m, inputs); err != nil {
		return nil, err
	}
	d = &T5Decoding{m: m, p: Eval(ctx), b: len(inputs)}
	dev := m.Word.Weight.Device()
	defer func() {
		if err != nil {
			d.Close()
			d = nil
		}
	}()
	defer recoverCommErrorAs("Generate", &err)
	s := dev.NewScope()
	defer s.Close()
	dev.NoGrad(func() {
		ids, attend := padInputs(dev, inputs) // [B, Te] each; attend nil without padding
		memory := m.Encode(d.p, ids, attend)  // [B, Te, C]
		if attend != nil {
			d.cross.Masked = PaddingMask(attend).Keep() // [B, 1, 1, Te]
		}
		for _, l := range m.Decoder.Layers {
			k, v := l.Cross.MemoryKV(d.p, memory) // [B, NH/tp, Te, HS]
			d.mem = append(d.mem, &KVCache{K: k.Clone().Keep(), V: v.Clone().Keep()})
			d.self = append(d.self, &KVCache{})
		}
	})
	return d, nil
}

// checkT5Inputs returns an error if m cannot decode from inputs.
func checkT5Inputs(m *T5, inputs [][]int32) error {
	if m.region.sp {
		return errors.New("nn: T5Decoding: m was built with sequence parallelism; build it without for inference (same parameters)")
	}
	if len(inputs) == 0 {
		return errors.New("nn: T5Decoding: no inputs")
	}
	for i, in := range inputs {
		if len(in) == 0 {
			return fmt.Errorf("nn: T5Decoding: input %d is empty", i)
		}
		for j, id := range in {
			if id < 0 || int(id) >= m.Config.Vocab {
				return fmt.Errorf("nn: T5Decoding: input %d token %d: id %d outside [0, %d)", i, j, id, m.Config.Vocab)
			}
		}
	}
	return nil
}

// padInputs returns inputs as ids [B, Te] (Te the longest row, shorter rows padded with
// id 0) and, if any row is padded, Hugging Face's attention_mask [B, Te].
func padInputs(dev *tensor.Device, inputs [][]int32) (ids, attend *tensor.Tensor) {
	te := 0
	for _, in := range inputs {
		te = max(te, len(in))
	}
	flat, mask := make([]int32, len(inputs)*te), make([]int32, len(inputs)*te)
	padded := false
	for i, in := range inputs {
		copy(flat[i*te:], in)
		for j := range len(in) {
			mask[i*te+j] = 1
		}
		padded = padded || len(in) < te
	}
	ids = tensor.FromSlice(dev, flat, len(inputs), te)
	if padded {
		attend = tensor.FromSlice(dev, mask, len(inputs), te)
	}
	return ids, attend
}

// Len returns the number of decoder positions run so far.
func (d *T5Decoding) Len() int { return d.self[0].Len() }

// Next feeds one decoder token per row (ids [B]: the decoder start id first, then each
// row's previous token) and returns the logits of the new position over the true
// vocabulary, [B][V], the same on every TP rank. It returns an error for a wrong number
// of ids, an id outside [0, V), a cancelled context or a failed collective.
func (d *T5Decoding) Next(ids []int32) (logits [][]float64, err error) {
	if len(ids) != d.b {
		return nil, fmt.Errorf("nn: T5Decoding.Next: %d ids for %d rows", len(ids), d.b)
	}
	for i, id := range ids {
		if id < 0 || int(id) >= d.m.Config.Vocab {
			return nil, fmt.Errorf("nn: T5Decoding.Next: row %d: id %d outside [0, %d)", i, id, d.m.Config.Vocab)
		}
	}
	if err := d.p.Ctx.Err(); err != nil {
		return nil, fmt.Errorf("nn: T5Decoding.Next: %w", err)
	}
	defer recoverCommErrorAs("Generate", &err)
	dev := d.m.Word.Weight.Device()
	s := dev.NewScope()
	defer s.Close()
	dev.NoGrad(func() { logits = d.step(tensor.FromSlice(dev, ids, d.b, 1)) })
	return logits, nil
}

// step runs the decoder on ids [B, 1] at the next position and returns the gathered
// logits [B][V].
func (d *T5Decoding) step(ids *tensor.Tensor) [][]float64 {
	m, p, past := d.m, d.p, d.Len()
	x := m.embed(p, ids, "decoder.embedding.dropout") // [B, 1, C]
	self := AttentionMask{Causal: true, Bias: m.DecoderBias.Forward(1, past+1, past)}
	for i, l := range m.Decoder.Layers {
		x = l.Forward(p, x, LayerInput{Self: self, Cross: d.cross, Cache: d.self[i], CrossKV: d.mem[i]})
	}
	x = tensor.Scale(m.DecoderNorm.Forward(x), 1/math.Sqrt(float64(m.Config.Hidden)))
	out := m.Output.Forward(p, x)                                                   // [B, 1, Vp/tp]
	full := tensor.ToSlice[float64](parallel.GatherFromTP(p.Ctx, m.region.tp, out)) // [B, 1, Vp]
	return vocabRows(full, d.b, m.Config.Vocab)
}

// vocabRows splits full [B, Vp] into B rows of its first v columns (the true vocabulary).
func vocabRows(full []float64, b, v int) [][]float64 {
	vp := len(full) / b
	rows := make([][]float64, b)
	for i := range rows {
		rows[i] = full[i*vp : i*vp+v : i*vp+v]
	}
	return rows
}

// Close releases the caches. A closed T5Decoding must not be used again.
func (d *T5Decoding) Close() {
	for _, c := range append(append([]*KVCache(nil), d.self...), d.mem...) {
		c.release()
	}
	if d.cross.Masked != nil {
		d.cross.Masked.Release()
		d.cross.Masked = nil
	}
}

// T5GenerateOptions configures GenerateT5: GenerateOptions's decoding (greedy by
// default; EOD lists the ids that end a sequence, T5's EOS) and the decoder start id.
type T5GenerateOptions struct {
	GenerateOptions
	// DecoderStart is the first decoder input (Hugging Face's decoder_start_token_id,
	// T5's pad id 0).
	DecoderStart int32
}

// GenerateT5 decodes an output for each input from the T5 m: the encoder runs once and
// the decoder, with a KV cache, produces up to o.MaxNewTokens tokens per input, stopping
// after an id of o.EOD (included in the result). Under tensor parallelism every rank of
// m's TP group must call it with the same inputs and options and gets the same result.
// It returns the errors of NewT5Decoding and T5Decoding.Next, for invalid options and
// for non-finite logits.
func GenerateT5(ctx context.Context, m *T5, inputs [][]int32, o T5GenerateOptions) ([][]int32, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.DecoderStart < 0 || int(o.DecoderStart) >= m.Config.Vocab {
		return nil, fmt.Errorf("nn: GenerateT5: DecoderStart %d outside [0, %d)", o.DecoderStart, m.Config.Vocab)
	}
	d, err := NewT5Decoding(ctx, m, inputs)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	out := make([][]int32, len(inputs))
	ids := make([]int32, len(inputs))
	for i := range ids {
		ids[i] = o.DecoderStart
	}
	ended := make([]bool, len(inputs))
	for step := 0; step < o.MaxNewTokens; step++ {
		logits, err := d.Next(ids)
		if err != nil {
			return nil, err
		}
		live := false
		for i := range ids {
			if ended[i] {
				continue // keeps feeding its last token
			}
			id, err := nextToken(logits[i], o.GenerateOptions, o.uniform(step, i))
			if err != nil {
				return nil, fmt.Errorf("nn: GenerateT5: input %d step %d: %w", i, step, err)
			}
			ids[i] = id
			out[i] = append(out[i], ids[i])
			ended[i] = isEOD(ids[i], o.EOD)
			live = live || !ended[i]
		}
		if !live {
			break
		}
	}
	return out, nil
}
