package train

import (
	"context"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// PassFor returns the training Pass of micro-batch micro of step step on the mesh, where
// a step's global batch is microbatches micro-batches of microBatchSize samples on each
// of the DP ranks: dropout keyed by the step (rng.Fold(step)) and by each sample's global
// index, so the masks are the same at every TP, PP and DP layout with that global batch.
// Its LossScale is 1/microbatches, the factor the schedule multiplies each micro-batch's
// loss by before backward: right without a loss scaler; with one (fp16), use
// Trainer.PassFor, which multiplies in the scaler's scale.
func PassFor(ctx context.Context, m *parallel.Mesh, rng tensor.RNG, step, micro, microBatchSize, microbatches int) *nn.Pass {
	global := microbatches * microBatchSize * m.Sizes().DP
	return &nn.Pass{Ctx: ctx, Train: true, RNG: rng.Fold(uint64(step)),
		SampleOffset: step*global + m.SampleOffset(microBatchSize, micro), LossScale: 1 / float64(microbatches)}
}

// PassFor is the package's PassFor on the trainer's mesh, with LossScale the factor that
// backward receives this micro-batch's loss with: 1/microbatches times the optimizer's
// loss scale (1 without a scaler), as Megatron sets MoEAuxLossAutoScaler's scale, so
// that losses a model adds inside (mixture-of-experts load balancing, nn.Pass.LossScale)
// are scaled as the main loss; its Trace is the trainer's (Config.Trace), which then
// records context-parallel ring steps. Call it during Step (from the forward-step function), as
// the loss scale may change between steps.
func (t *Trainer) PassFor(ctx context.Context, rng tensor.RNG, step, micro, microBatchSize, microbatches int) *nn.Pass {
	p := PassFor(ctx, t.mesh, rng, step, micro, microBatchSize, microbatches)
	p.LossScale *= t.opt.LossScale()
	p.Trace = t.cfg.Trace // context-parallel ring steps
	return p
}

// GPTBatch returns micro-batch micro's token ids and labels, [B, T] each (-100 labels
// are ignored). The first stage uses the ids, the last the labels.
type GPTBatch func(micro int) (ids, labels *tensor.Tensor)

// GPTForward returns the forward-step function of this rank's GPT chunks: chunk 0 of
// the first stage embeds the micro-batch's ids, other chunks continue from the received
// activation, and the last chunk of the last stage returns the micro-batch's mean cross
// entropy against its labels. pass gives each micro-batch's Pass (PassFor).
func GPTForward(chunks []*nn.GPT, pass func(micro int) *nn.Pass, batch GPTBatch) parallel.ForwardFunc {
	return GPTDocumentsForward(chunks, pass, func(micro int) GPTMicroBatch {
		ids, labels := batch(micro)
		return GPTMicroBatch{IDs: ids, Labels: labels}
	})
}

// GPTMicroBatch is one GPT micro-batch as GPTDocumentsForward reads it.
type GPTMicroBatch struct {
	IDs, Labels *tensor.Tensor // [B, T] each; -100 labels are ignored
	// Documents are the documents packed into the sequences (Megatron's
	// --reset-position-ids, --reset-attention-mask): each token's position and document,
	// [B, T] each, or nil. Every stage reads them (positions for RoPE, documents for
	// attention), so the batch function is called on every stage.
	nn.Documents
}

// GPTDocumentsForward is GPTForward for micro-batches that carry their documents: every
// chunk runs nn.GPT.ForwardDocuments with the micro-batch's Documents. With nil
// Documents it computes what GPTForward does, bit for bit.
func GPTDocumentsForward(chunks []*nn.GPT, pass func(micro int) *nn.Pass, batch func(micro int) GPTMicroBatch) parallel.ForwardFunc {
	return func(s parallel.Step) (*tensor.Tensor, error) {
		m, p, b := chunks[s.Chunk], pass(s.Micro), batch(s.Micro)
		in := s.Input
		if in == nil {
			in = b.IDs
		}
		out := m.ForwardDocuments(p, in, b.Documents) // [B, T, C] (T/tp under SP), or logits [B, T, Vp/tp]
		if !s.Last {
			return out, nil
		}
		loss, _ := m.LossConsuming(p, out, b.Labels) // nothing reads the logits afterwards
		return loss, nil
	}
}

// BERTBatch is one BERT micro-batch: In without Hidden (every stage needs Attend), the
// masked-LM labels [B, T] and the binary labels [B] (nil: no binary loss).
type BERTBatch struct {
	In                     nn.BERTInput
	LMLabels, BinaryLabels *tensor.Tensor
}

// BERTForward returns the forward-step function of this rank's BERT chunks, as
// GPTForward does for a GPT; the loss is BERT's pre-training loss (masked LM plus binary).
func BERTForward(chunks []*nn.BERT, pass func(micro int) *nn.Pass, batch func(micro int) BERTBatch) parallel.ForwardFunc {
	return func(s parallel.Step) (*tensor.Tensor, error) {
		m, p, b := chunks[s.Chunk], pass(s.Micro), batch(s.Micro)
		in := b.In
		in.Hidden = s.Input
		out := m.Forward(p, in)
		if !s.Last {
			return out.Hidden, nil
		}
		total, _, _ := m.Loss(p, out, b.LMLabels, b.BinaryLabels)
		return total, nil
	}
}
