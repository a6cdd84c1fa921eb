package data

import (
	"fmt"
)

// ReadSample returns sample i (after shuffling), or an error naming the dataset, the
// sample and the offset when its tokens cannot be read (an I/O error) or do not make
// SeqLen+1 tokens (the source changed since the indices were built). It panics if i is
// not in [0, Len()).
func (d *GPTDataset) ReadSample(i int) (GPTSample, error) {
	if i < 0 || i >= len(d.shuffle) {
		panic(fmt.Sprintf("data: GPTDataset.Sample(%d) of %d samples", i, len(d.shuffle)))
	}
	s := d.cfg.SeqLen
	toks, err := d.readUnshuffled(make([]int32, 0, s+1), i, int(d.shuffle[i]))
	if err != nil {
		return GPTSample{}, err
	}
	out := GPTSample{
		Tokens: toks[:s:s], Labels: toks[1:],
		LossMask: make([]float32, s), PositionIDs: make([]int32, s),
	}
	if d.cfg.ResetAttentionMask {
		out.Segments = make([]int32, s)
	}
	pos, doc := int32(0), int32(0)
	for j, t := range out.Tokens {
		out.LossMask[j] = 1
		out.PositionIDs[j] = pos
		if out.Segments != nil {
			out.Segments[j] = doc
		}
		pos++
		if t == d.cfg.EOD && d.cfg.EOD >= 0 {
			doc++
			if d.cfg.EODMaskLoss {
				out.LossMask[j] = 0
			}
			if d.cfg.ResetPositionIDs {
				pos = 0
			}
		}
	}
	return out, nil
}

// Sample is ReadSample for callers that cannot handle an error: it panics where
// ReadSample returns one, with the same message. Loaders use ReadSample.
func (d *GPTDataset) Sample(i int) GPTSample { return must(d.ReadSample(i)) }

// readUnshuffled appends the s+1 tokens of unshuffled sample k (shuffled sample i) to
// dst, checking every range against the source before reading it.
func (d *GPTDataset) readUnshuffled(dst []int32, i, k int) ([]int32, error) {
	p0, o0 := int(d.sample[2*k]), int(d.sample[2*k+1])
	p1, o1 := int(d.sample[2*k+2]), int(d.sample[2*k+3])
	start := len(dst)
	for p := p0; p <= p1; p++ {
		seq := int(d.docIndex[p])
		length := d.src.SequenceLen(seq)
		from, to := 0, length
		if p == p0 {
			from = o0
		}
		if p == p1 {
			to = o1 + 1
		}
		if from > to || to > length {
			return nil, fmt.Errorf("data: GPT dataset %s: sample %d reads tokens [%d, %d) of sequence %d, which has %d: the source changed since its indices were built",
				d.name, i, from, to, seq, length)
		}
		var err error
		if dst, err = d.src.ReadTokens(dst, seq, from, to-from); err != nil {
			return nil, fmt.Errorf("data: GPT dataset %s: sample %d: sequence %d at token offset %d: %w", d.name, i, seq, from, err)
		}
	}
	if n := len(dst) - start; n != d.cfg.SeqLen+1 {
		return nil, fmt.Errorf("data: GPT dataset %s: sample %d (sequence %d offset %d to sequence %d offset %d) holds %d tokens, not SeqLen+1 = %d: the source changed since its indices were built",
			d.name, i, d.docIndex[p0], o0, d.docIndex[p1], o1, n, d.cfg.SeqLen+1)
	}
	return dst, nil
}

// checkSampleRows checks that the sample index sample fits the documents read in the
// order doc (size gives a document's length): rows in order, each inside its document
// (an offset below its length, the first row at the very start), and each sample
// spanning seqLen stream tokens, so that it reads seqLen+1. Stale or damaged indices fail
// it; the error names the first bad row.
func checkSampleRows(doc, sample []int64, size func(int64) int, seqLen int) error {
	var cursor, cum, prev int64 // cum: tokens of doc[:cursor]
	for k := 0; k < len(sample); k += 2 {
		p, o := sample[k], sample[k+1]
		if p < cursor || p >= int64(len(doc)) || o < 0 {
			return fmt.Errorf("sample row %d = (%d, %d) out of range", k/2, p, o)
		}
		for ; cursor < p; cursor++ {
			cum += int64(size(doc[cursor]))
		}
		if (k == 0 && o != 0) || (k > 0 && o >= int64(size(doc[p]))) {
			return fmt.Errorf("sample row %d = (%d, %d) outside document %d of %d tokens", k/2, p, o, doc[p], size(doc[p]))
		}
		if pos := cum + o; k > 0 && pos-prev != int64(seqLen) {
			return fmt.Errorf("sample %d spans %d tokens, not SeqLen = %d: the indices do not match the source", k/2-1, pos-prev, seqLen)
		}
		prev = cum + o
	}
	return nil
}
