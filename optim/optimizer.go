package optim

import (
	"context"
	"errors"
	"fmt"
	"math"

	"megago/nn/param"
	"megago/parallel"
	"megago/tensor"
)

// ErrNonFinite is returned (wrapped) by Step when the gradients hold an inf or a NaN and
// there is no loss scaler to skip the step. The parameters are left untouched.
var ErrNonFinite = errors.New("optim: non-finite gradient")

// clipEps is added to the norm before dividing, as Megatron and PyTorch do.
const clipEps = 1e-6

// Optimizer updates a set of parameters from their gradients with one Rule, after
// averaging the gradients over the data-parallel group, unscaling, checking them for
// inf/nan and clipping their global norm. Its parameters live in flat Buffers; their
// master weights and the rule's state live in this rank's shards of those buffers (the
// whole buffers unless Config.Distributed). An Optimizer belongs to one rank and is not
// safe for concurrent use.
type Optimizer struct {
	cfg    Config
	rule   Rule
	groups Groups
	dev    *tensor.Device

	bufs    []*Buffer
	shards  []*shard
	masters []*tensor.Tensor   // per buffer: separate master weights, or nil
	states  [][]*tensor.Tensor // per buffer, per state name: this rank's state
	reduced [][]bool           // per buffer, per bucket: reduced since ZeroGrad
	steps   int                // updates made
	incr    int                // how far a successful step advances the Schedule (0: 1)
	gather  *paramGather       // the all-gather of updated parameters under Distributed
}

// New lays params out in flat buffers (see NewBuffers: each parameter's tensor and
// gradient become views of them) and returns an optimizer for them. Master weights are
// made for BF16 and F16 parameters (F32 copies; F32 and F64 parameters are their own
// masters). Under Config.Distributed every rank of Groups.DP must call New with the same
// parameters, and they must hold the same values (megago's layout-independent
// initialization guarantees this). Call it outside any scope of the parameters' device.
// It returns the configuration's validation error.
func New(params []*param.Param, cfg Config) (*Optimizer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(params) == 0 {
		return nil, errors.New("optim: New: no parameters")
	}
	o := &Optimizer{cfg: cfg, rule: cfg.Rule, groups: cfg.Groups.withDefaults(), dev: params[0].Device()}
	if o.rule == nil {
		o.rule = AdamW{}
	}
	mult := cfg.Multipliers
	if mult == nil {
		mult = DefaultMultipliers
	}
	o.bufs = NewBuffers(params, BufferConfig{DP: o.groups.DP.Size(), ExpertDP: o.groups.ExpertDP.Size(), BucketSize: cfg.BucketSize})
	names := o.rule.stateNames()
	for _, b := range o.bufs {
		dp, tp := o.groups.DP, o.groups.TP
		if b.Expert {
			dp, tp = o.groups.ExpertDP, o.groups.ExpertTP
		}
		parts, rank := 1, 0 // shards per bucket, and this rank's
		if cfg.Distributed {
			parts, rank = dp.Size(), dp.Rank()
		}
		md, n := masterDType(b.DType), b.Size()/parts
		var master *tensor.Tensor
		if md != b.DType {
			master = tensor.Empty(o.dev, md, n)
		}
		state := make([]*tensor.Tensor, len(names))
		for i := range state {
			state[i] = tensor.Zeros(o.dev, md, n)
		}
		o.masters, o.states = append(o.masters, master), append(o.states, state)
		o.reduced = append(o.reduced, make([]bool, len(b.Buckets)))
		at := 0
		for k, bk := range b.Buckets {
			size := (bk.End - bk.Start) / parts
			lo := bk.Start + rank*size
			o.shards = append(o.shards, newShard(b, k, lo, lo+size, at, dp, master, state, mult, tp.Rank()))
			at += size
		}
	}
	o.gather = newParamGather(o.shards, cfg.Trace)
	if o.overlapsGather() {
		for i, sh := range o.gather.shards {
			for _, p := range sh.buf.Buckets[sh.bucket].Params {
				p.SetBeforeForward(o.gather.hook(i))
			}
		}
	}
	return o, nil
}

// overlapsGather reports whether Step leaves the parameter all-gather to the next
// forward pass.
func (o *Optimizer) overlapsGather() bool { return o.cfg.OverlapParamGather && o.sharded() }

// sharded reports whether the distributed optimizer splits some bucket between ranks.
func (o *Optimizer) sharded() bool {
	if !o.cfg.Distributed {
		return false
	}
	for _, sh := range o.shards {
		if sh.dp.Size() > 1 {
			return true
		}
	}
	return false
}

// Buffers returns the flat buffers holding the parameters: one per dtype, then one per
// dtype of the expert parameters (Buffer.Expert).
func (o *Optimizer) Buffers() []*Buffer { return o.bufs }

// Steps returns the number of updates made (skipped steps do not count).
func (o *Optimizer) Steps() int { return o.steps }

// ZeroGrad sets every gradient (and main gradient) to zero, ready for the next step.
func (o *Optimizer) ZeroGrad() {
	for i, b := range o.bufs {
		b.ZeroGrad()
		clear(o.reduced[i])
	}
}

// AccumulateGrads moves the gradients of BF16 and F16 parameters into their F32 main
// gradients (see Buffer.MainGrads). Call it after each micro-batch's backward when
// accumulating several, so the sum is taken in fp32; Step calls it for the last one. It
// does nothing for F32 and F64 parameters, whose gradients are their main gradients. It
// panics if a bucket was reduced since the last ZeroGrad (its main gradients are final).
func (o *Optimizer) AccumulateGrads() {
	for i, b := range o.bufs {
		for k := range b.Buckets {
			if o.reduced[i][k] {
				panic(fmt.Sprintf("optim: AccumulateGrads: bucket %d of the %v buffer was reduced since ZeroGrad", k, b.DType))
			}
			b.AccumulateGrads(k)
		}
	}
}

// ReduceBucket finishes the gradients of bucket k of buffer i: it accumulates them into
// the main gradients and averages those over the DP group, by all-reduce, or under the
// distributed optimizer by reduce-scatter into this rank's shard (only the shard is then
// valid). A buffer of expert parameters is reduced over ExpertDP instead and scaled by
// ExpertDP's size / DP's size, so that its gradients too are averages over DP (each
// expert's gradient already sums the tokens of the expert-parallel ranks that sent it
// tokens). A bucket reduced since the last ZeroGrad is left alone. Data-parallel wrappers
// call it as soon as a bucket's gradients are complete; Step reduces the rest. It first
// completes a parameter all-gather left pending by Step (FinishParamGather), so that
// the two never use the DP group at once.
func (o *Optimizer) ReduceBucket(ctx context.Context, i, k int) error {
	if o.reduced[i][k] {
		return nil
	}
	if err := o.gather.finish(); err != nil {
		return err
	}
	b, sh := o.bufs[i], o.shardOf(i, k)
	b.AccumulateGrads(k)
	bk := b.Buckets[k]
	full := b.MainGrads.Narrow(0, bk.Start, bk.End-bk.Start)
	if dp := sh.dp; dp.Size() > 1 {
		var err error
		if o.cfg.Distributed {
			err = dp.ReduceScatter(ctx, sh.grad, full, parallel.Avg)
		} else {
			err = dp.AllReduce(ctx, full, parallel.Avg)
		}
		if err != nil {
			return fmt.Errorf("optim: averaging gradients of bucket %d of the %s buffer over %s: %w", k, b, dp.Name(), err)
		}
	}
	if f := float64(sh.dp.Size()) / float64(o.groups.DP.Size()); f != 1 {
		if o.cfg.Distributed {
			full = sh.grad
		}
		o.dev.Backend().Unary(tensor.OpMulScalar, full.Span(), full.Span(), f)
	}
	o.reduced[i][k] = true
	return nil
}

// ReduceGrads reduces every bucket not yet reduced (see ReduceBucket).
func (o *Optimizer) ReduceGrads(ctx context.Context) error {
	for i, b := range o.bufs {
		for k := range b.Buckets {
			if err := o.ReduceBucket(ctx, i, k); err != nil {
				return err
			}
		}
	}
	return nil
}

func (o *Optimizer) shardOf(i, k int) *shard {
	for _, sh := range o.shards {
		if sh.buf == o.bufs[i] && sh.bucket == k {
			return sh
		}
	}
	panic(fmt.Sprintf("optim: no shard for bucket %d of buffer %d", k, i))
}

// StepResult describes one call of Step.
type StepResult struct {
	// GradNorm is the global L2 norm of the (unscaled, averaged) gradients before
	// clipping; not finite when the step was skipped, NaN under Config.SkipGradNorm.
	GradNorm float64
	// Skipped is set when the gradients held an inf or a NaN and no update was made.
	Skipped bool
	// LR and WeightDecay are the base values used (before multipliers); 0 when skipped.
	LR, WeightDecay float64
	// LossScale is the loss scale the gradients were divided by (1 without a scaler).
	LossScale float64
}

// Step makes one update: it reduces the gradients (ReduceGrads), checks them for inf and
// NaN on every rank of the model-parallel group (and of DP under the distributed
// optimizer) and skips the step on all of them together if any rank found one, computes
// the global gradient norm over the same group (neither check nor norm under
// Config.SkipGradNorm), clips, and runs the rule's fused kernel on each shard, which
// also refreshes BF16/F16 parameters from their master weights; under the distributed
// optimizer the updated parameters are then all-gathered over DP, or, with
// Config.OverlapParamGather, left to the next forward pass (see FinishParamGather).
//
// On a skipped step the loss scaler, if any, lowers its scale and Step returns no error;
// without a scaler it returns an error wrapping ErrNonFinite. Either way the parameters,
// the rule's state, Steps and the Schedule are unchanged. Communication errors are
// returned as they are.
func (o *Optimizer) Step(ctx context.Context) (StepResult, error) {
	res := StepResult{LossScale: 1}
	if err := o.gather.finish(); err != nil {
		return res, err
	}
	if err := o.ReduceGrads(ctx); err != nil {
		return res, err
	}
	if o.cfg.Scaler != nil {
		res.LossScale = o.cfg.Scaler.Scale()
	}
	be := o.dev.Backend()
	if o.cfg.SkipGradNorm {
		res.GradNorm = math.NaN()
	} else if err := o.checkGrads(ctx, be, &res); err != nil || res.Skipped {
		return res, err
	}
	gradScale := 1 / res.LossScale
	if o.cfg.ClipGrad > 0 {
		if coeff := o.cfg.ClipGrad / (res.GradNorm + clipEps); coeff < 1 {
			gradScale *= coeff
		}
	}
	res.LR, res.WeightDecay = o.cfg.LR, o.cfg.WeightDecay
	if s := o.cfg.Schedule; s != nil {
		res.LR, res.WeightDecay = s.LR(), s.WD()
	}
	o.steps++
	for _, sh := range o.shards {
		sh.setRates(res.LR, res.WeightDecay)
		o.rule.update(be, o.steps, gradScale, sh)
	}
	if err := o.gatherParams(ctx); err != nil {
		return res, err
	}
	if s := o.cfg.Schedule; s != nil {
		s.Step(max(o.incr, 1))
	}
	return res, nil
}

// SetScheduleIncrement sets how far each successful Step advances the Schedule from now
// on: 1 (the default) counts optimizer steps; Megatron counts samples when training by
// samples, advancing its schedule by each step's global batch, which grows under a
// batch-size ramp-up. A skipped step advances nothing. It panics if n < 1.
func (o *Optimizer) SetScheduleIncrement(n int) {
	if n < 1 {
		panic(fmt.Sprintf("optim: SetScheduleIncrement(%d): want at least 1", n))
	}
	o.incr = n
}

// checkGrads sets res.GradNorm to the global norm of the reduced gradients, after checking
// them for inf and NaN over the groups that hold different parts of them. It sets
// res.Skipped when some rank found one (updating the loss scaler, if any, either way),
// and then returns an error wrapping ErrNonFinite unless there is a loss scaler.
func (o *Optimizer) checkGrads(ctx context.Context, be tensor.Backend, res *StepResult) error {
	var dense, expert gradStats
	for _, sh := range o.shards {
		st := &dense
		if sh.buf.Expert && o.cfg.Groups.separateExperts() {
			st = &expert
		}
		c, a := sh.sumSquares(be)
		st.counted, st.all = st.counted+c, st.all+a
	}
	found, err := o.reduceStats(ctx, dense.nonFinite(), expert.nonFinite(), parallel.Max, "inf/nan check")
	if err != nil {
		return err
	}
	if o.cfg.Scaler != nil {
		o.cfg.Scaler.Update(found > 0)
	}
	if found > 0 {
		res.Skipped, res.GradNorm = true, math.Inf(1)
		if o.cfg.Scaler == nil {
			return fmt.Errorf("optim: step %d skipped, parameters unchanged (a loss scaler would skip such steps): %w", o.steps+1, ErrNonFinite)
		}
		return nil
	}
	total, err := o.reduceStats(ctx, dense.counted, expert.counted, parallel.Sum, "gradient norm")
	if err != nil {
		return err
	}
	res.GradNorm = math.Sqrt(total) / res.LossScale
	return nil
}

// gradStats are sums of squared main gradients on this rank: of the elements that count
// toward the norm, and of all (for the inf/nan check).
type gradStats struct{ counted, all float64 }

// nonFinite returns 1 if the sums hold an inf or a NaN, else 0.
func (s gradStats) nonFinite() float64 {
	if math.IsNaN(s.all) || math.IsInf(s.all, 0) {
		return 1
	}
	return 0
}

// reduceStats all-reduces a statistic of the dense gradients over MP (and DP under the
// distributed optimizer) and, when the expert groups are separate, one of the expert
// gradients over ExpertMP (and ExpertDP), and combines the two with op (Sum or Max).
func (o *Optimizer) reduceStats(ctx context.Context, dense, expert float64, op parallel.Op, what string) (float64, error) {
	v, err := o.reduceStat(ctx, dense, op, what, o.groups.MP, o.groups.DP)
	if err != nil || !o.cfg.Groups.separateExperts() {
		return v, err
	}
	e, err := o.reduceStat(ctx, expert, op, what+" of expert gradients", o.groups.ExpertMP, o.groups.ExpertDP)
	if op == parallel.Max {
		return max(v, e), err
	}
	return v + e, err
}

// reduceStat all-reduces one number over the groups whose ranks hold different parts of
// the gradients: mp, and dp under the distributed optimizer.
func (o *Optimizer) reduceStat(ctx context.Context, v float64, op parallel.Op, what string, mp, dp parallel.Comm) (float64, error) {
	groups := []parallel.Comm{mp}
	if o.cfg.Distributed {
		groups = append(groups, dp)
	}
	var t *tensor.Tensor
	for _, g := range groups {
		if g.Size() == 1 {
			continue
		}
		if t == nil {
			t = tensor.Scalar(o.dev, tensor.F64, v)
			defer t.Release()
		}
		if err := g.AllReduce(ctx, t, op); err != nil {
			return 0, fmt.Errorf("optim: %s over %s: %w", what, g.Name(), err)
		}
	}
	if t == nil {
		return v, nil
	}
	return t.Item(), nil
}

// gatherParams all-gathers each bucket's updated parameters over DP under the
// distributed optimizer (in place: each rank's shard is already in its slot), or defers
// that to the next forward pass with Config.OverlapParamGather.
func (o *Optimizer) gatherParams(ctx context.Context) error {
	if !o.sharded() {
		return nil
	}
	if o.overlapsGather() {
		o.gather.deferRound(ctx)
		return nil
	}
	return o.gather.all(ctx)
}

// FinishParamGather completes the parameter all-gather that Step left pending under
// Config.OverlapParamGather, and returns its error (nil when none is pending, and
// always without that option). Until then, or until a forward pass has passed a
// parameter (its BeforeForward hook waits for the parameter's bucket), the parameters
// outside this rank's shards hold the previous step's values: call it on every DP rank
// before reading parameters other than by a forward pass of the model (evaluation
// through a forward pass is fine; saving a checkpoint or comparing weights is not).
// train.Trainer.Eval and checkpoint.Save call it. The gather runs under the context of
// the Step that left it.
func (o *Optimizer) FinishParamGather() error { return o.gather.finish() }

// LossScale returns the factor ScaleLoss multiplies losses by now: the loss scaler's
// scale, or 1 without one.
func (o *Optimizer) LossScale() float64 {
	if o.cfg.Scaler == nil {
		return 1
	}
	return o.cfg.Scaler.Scale()
}

// ScaleLoss returns the loss to call Backward on: loss times the loss scale, computed in
// at least F32 (so the scaled value does not overflow an F16 loss), or loss itself
// without a scaler.
func (o *Optimizer) ScaleLoss(loss *tensor.Tensor) *tensor.Tensor {
	if o.cfg.Scaler == nil {
		return loss
	}
	if loss.DType() != tensor.F64 {
		loss = loss.Cast(tensor.F32)
	}
	return tensor.Scale(loss, o.cfg.Scaler.Scale())
}

// Memory is the storage an optimizer and its buffers hold on this rank, in bytes.
type Memory struct {
	Params    int64 // model parameters (the buffers' Params)
	Grads     int64 // their gradients in the model dtype
	MainGrads int64 // separate F32 main gradients (0 when Grads are the main gradients)
	Master    int64 // separate master weights (0 when the parameters are their own masters)
	State     int64 // the rule's state (Adam's moments, SGD's momentum)
}

// Memory measures the storage held by the buffers, master weights and state.
func (o *Optimizer) Memory() Memory {
	bytes := func(t *tensor.Tensor) int64 { return int64(t.Numel() * t.DType().Size()) }
	var m Memory
	for i, b := range o.bufs {
		m.Params += bytes(b.Params)
		m.Grads += bytes(b.Grads)
		if b.MainGrads != b.Grads {
			m.MainGrads += bytes(b.MainGrads)
		}
		if o.masters[i] != nil {
			m.Master += bytes(o.masters[i])
		}
		for _, s := range o.states[i] {
			m.State += bytes(s)
		}
	}
	return m
}
