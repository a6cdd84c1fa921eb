package main

import (
	"flag"
	"fmt"
	"strings"
)

// Documents packed into a sample: Megatron's --eod-mask-loss, --reset-position-ids and
// --reset-attention-mask. A sample of --seq-length tokens spans the end of one document
// and the start of the next, separated by the tokenizer's end-of-document (EOD) token;
// these flags keep the model from learning across that boundary, as Megatron's
// get_ltor_masks_and_position_ids does:
//
//   - --eod-mask-loss: the loss of each token whose input is EOD (predicting the next
//     document's first token) is masked out. A micro-batch's loss is the mean over its
//     unmasked tokens, sum(loss·mask)/sum(mask); the iteration's loss and gradient are
//     the mean of the micro-batches' losses, averaged over DP: Megatron-core's default
//     (the schedule divides each micro-batch's sum by its own token count and by the
//     number of micro-batches; DDP averages). Megatron reports the token-weighted mean
//     over the global batch instead (sum of all losses over all tokens); the two differ
//     only when micro-batches hold different numbers of unmasked tokens.
//     --calculate-per-token-loss (gradients of that token-weighted mean) is not offered.
//   - --reset-position-ids: positions restart at 0 after each EOD input token; the
//     learned position embedding gathers them, RoPE rotates by them.
//   - --reset-attention-mask: a token attends only to earlier tokens of its own
//     document (after an EOD at position i, positions > i do not see positions ≤ i).
//     megago passes each token's document (data.GPTSample.Segments) to the fused
//     attention rather than a [T, T] mask per sample.
//
// All three need a tokenizer with an EOD token; a run without one stops before any work.

// docFlags are the three flags.
type docFlags struct {
	EODMaskLoss, ResetPositionIDs, ResetAttentionMask bool
}

// register adds the flags to fs.
func (d *docFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&d.EODMaskLoss, "eod-mask-loss", false, "mask the loss of tokens whose input is the end-of-document token")
	fs.BoolVar(&d.ResetPositionIDs, "reset-position-ids", false, "restart position ids after each end-of-document token")
	fs.BoolVar(&d.ResetAttentionMask, "reset-attention-mask", false, "keep attention within each document of a sample")
}

// any reports whether a flag is set.
func (d docFlags) any() bool { return d.EODMaskLoss || d.ResetPositionIDs || d.ResetAttentionMask }

// check returns an error naming the flags set when the tokenizer (of type tokenizer)
// has no EOD token (eod < 0).
func (d docFlags) check(eod int32, tokenizer string) error {
	if d.any() && eod < 0 {
		return fmt.Errorf("%s need a tokenizer with an end-of-document token; --tokenizer-type %s has none", d.describe(), tokenizer)
	}
	return nil
}

// checkCP refuses --reset-position-ids and --reset-attention-mask under context
// parallelism (cp > 1): a CP rank's attention does not yet take each token's position
// and document (--eod-mask-loss is the loss mask, which splits with the sequence).
func (d docFlags) checkCP(cp int) []string {
	if cp <= 1 || !d.ResetPositionIDs && !d.ResetAttentionMask {
		return nil
	}
	return []string{fmt.Sprintf("--context-parallel-size %d: --reset-position-ids and --reset-attention-mask are not implemented under context parallelism (--eod-mask-loss is)", cp)}
}

// describe lists the flags set, "" for none.
func (d docFlags) describe() string {
	var on []string
	for _, f := range []struct {
		set  bool
		name string
	}{{d.EODMaskLoss, "--eod-mask-loss"}, {d.ResetPositionIDs, "--reset-position-ids"}, {d.ResetAttentionMask, "--reset-attention-mask"}} {
		if f.set {
			on = append(on, f.name)
		}
	}
	return strings.Join(on, ", ")
}
