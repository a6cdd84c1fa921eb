package nn

import (
	"megago/parallel"
	"megago/tensor"
)

// This file is the router's auxiliary losses, computed on the host in float64 as
// Megatron's TopKRouter does (switch_load_balancing_loss_func, z_loss_func,
// compute_routing_scores_for_aux_loss, get_tokens_per_expert_and_token_count), and the
// autograd function that attaches them to the graph as MoEAuxLossAutoScaler does.

// loadBalancing is MoEConfig.LoadBalancing.
type loadBalancing uint8

const (
	lbAux    loadBalancing = iota // aux_loss: per micro-batch
	lbSeq                         // seq_aux_loss: per sequence, averaged over the batch
	lbGlobal                      // global_aux_loss: token counts over TP×CP×DP, averaged over the step's micro-batches
	lbNone                        // none
)

// routerLoss is one micro-batch's auxiliary losses: what their gradients need besides
// the logits, and their values for logging. Shapes as in moe_router_topk.go.
type routerLoss struct {
	n, e int
	// sigmoid says the load-balancing scores q are the sigmoid of the logits normalized
	// over all experts; else they are the softmax.
	sigmoid bool
	// w [N/groupLen, E] is ∂(load-balancing loss)/∂q, the coefficient included, for the
	// tokens of each group of groupLen (all N, or one sequence for seq_aux_loss); nil
	// without a load-balancing loss.
	w        []float64
	groupLen int
	// zScale is ∂(z-loss)/∂lse² of each token (0: no z-loss).
	zScale float64
	// The coefficient-weighted losses of the micro-batch, whole over the token group.
	aux, seqAux, globalAux, z float64
}

// newRouterLoss computes the auxiliary losses of logits [n, e] for the tokens x
// [b, t, C] of this rank: the counts of tokens per expert are summed over the router's
// token group (TP under sequence parallelism; its size g scales the token totals and
// divides the z-loss coefficient, as Megatron's tp_cp group does), and for
// global_aux_loss over the global group and accumulated over the step's micro-batches.
func (r *Router) newRouterLoss(p *Pass, dev *tensor.Device, logits []float64, b, t int) *routerLoss {
	s, n := r.set, b*t
	l := &routerLoss{n: n, e: s.e, sigmoid: s.kind == topKOfSigmoid, groupLen: n}
	g := float64(r.group.Size())
	lb := s.lb
	if s.auxCoeff == 0 {
		lb = lbNone
	}
	if lb == lbSeq {
		l.groupLen = t
	}
	var cnt, sumQ []float64 // [N/groupLen, E]
	if lb != lbNone {
		cnt, sumQ = l.countTokens(logits, s.k)
	}
	zsum := 0.0
	if s.zCoeff > 0 {
		sm := make([]float64, s.e)
		for i := range n {
			lse := softmaxInto(sm, logits[i*s.e:(i+1)*s.e])
			zsum += lse * lse
		}
		l.zScale = s.zCoeff / g / float64(n)
	}
	// One all-reduce over the token group: the counts the loss needs, and the sums of
	// scores and squared log-sum-exps that make the logged values the group's whole.
	var local []float64
	if lb == lbAux || lb == lbSeq {
		local = append(append(local, cnt...), sumQ...)
	}
	if s.zCoeff > 0 {
		local = append(local, zsum)
	}
	red := allReduceHost(p, dev, r.group, local)
	if s.zCoeff > 0 {
		l.z = s.zCoeff * red[len(red)-1] / (float64(n) * g)
	}
	k, ef, m := float64(s.k), float64(s.e), len(cnt)
	switch lb {
	case lbAux:
		tot := float64(n) * g
		l.aux = l.weigh(red[:m], red[m:2*m], ef*s.auxCoeff/(k*tot*tot))
	case lbSeq:
		tot := float64(t) * g
		l.seqAux = l.weigh(red[:m], red[m:2*m], ef*s.auxCoeff/(k*tot*tot)/float64(b))
	case lbGlobal:
		red := allReduceHost(p, dev, r.globalGroup(), append(cnt, sumQ...))
		avg := r.accumulateGlobal(p.SampleOffset, red[:m])
		tot := float64(n) * float64(r.globalGroup().Size())
		l.globalAux = l.weigh(avg, red[m:], ef*s.auxCoeff/(k*tot*tot))
	}
	return l
}

// balancingScores sets q to the scores of compute_routing_scores_for_aux_loss for one
// token's logits: their softmax, or their sigmoid (into sig) divided by its sum over the
// experts plus sigmoidEps, which it returns (1 for the softmax).
func (l *routerLoss) balancingScores(q, sig, logits []float64) (sum float64) {
	if !l.sigmoid {
		softmaxInto(q, logits)
		return 1
	}
	sum = sigmoidEps
	for j, v := range logits {
		sig[j] = sigmoid(v)
		sum += sig[j]
	}
	for j := range q {
		q[j] = sig[j] / sum
	}
	return sum
}

// countTokens returns, for each group of l.groupLen tokens and each expert, how many of
// the group's tokens the top k of the load-balancing scores route there (no expert
// bias, no dropping) and the sum of those scores.
func (l *routerLoss) countTokens(logits []float64, k int) (cnt, sumQ []float64) {
	e := l.e
	cnt, sumQ = make([]float64, l.n/l.groupLen*e), make([]float64, l.n/l.groupLen*e)
	q, sig, sel := make([]float64, e), make([]float64, e), make([]int, k)
	for i := range l.n {
		off := i / l.groupLen * e
		l.balancingScores(q, sig, logits[i*e:(i+1)*e])
		topK(q, sel)
		for _, j := range sel {
			cnt[off+j]++
		}
		for j, v := range q {
			sumQ[off+j] += v
		}
	}
	return cnt, sumQ
}

// weigh sets l.w to cnt·c and returns the logged loss Σ sumQ·cnt·c.
func (l *routerLoss) weigh(cnt, sumQ []float64, c float64) float64 {
	l.w = make([]float64, len(cnt))
	v := 0.0
	for i := range cnt {
		l.w[i] = cnt[i] * c
		v += sumQ[i] * l.w[i]
	}
	return v
}

// backward adds to gl [N, E] scale times the gradient of the micro-batch's auxiliary
// losses with respect to logits [N, E].
func (l *routerLoss) backward(logits, gl []float64, scale float64) {
	e := l.e
	q, sig, sm := make([]float64, e), make([]float64, e), make([]float64, e)
	for i := range l.n {
		row, x := gl[i*e:(i+1)*e], logits[i*e:(i+1)*e]
		lse := 0.0
		if l.zScale != 0 || (l.w != nil && !l.sigmoid) {
			lse = softmaxInto(sm, x)
		}
		if l.w != nil {
			w := l.w[i/l.groupLen*e : (i/l.groupLen+1)*e]
			dot := 0.0
			if !l.sigmoid { // q = softmax
				for j := range e {
					dot += sm[j] * w[j]
				}
				for j := range e {
					row[j] += scale * sm[j] * (w[j] - dot)
				}
			} else { // q = σ / (Σσ + ε)
				d := l.balancingScores(q, sig, x)
				for j := range e {
					dot += w[j] * sig[j]
				}
				for j := range e {
					row[j] += scale * (w[j]/d - dot/(d*d)) * sig[j] * (1 - sig[j])
				}
			}
		}
		if l.zScale != 0 { // z = zScale·Σ lse², ∂lse/∂logits = softmax
			for j := range e {
				row[j] += scale * l.zScale * 2 * lse * sm[j]
			}
		}
	}
}

// routeFn maps the logits [N, E] to the routing probabilities [N, E] (0 where not routed
// or dropped). Its backward also adds the gradients of the auxiliary losses, scaled by
// the pass's loss scale: Megatron's MoEAuxLossAutoScaler, which passes the
// probabilities through unchanged and back-propagates the scale into the attached loss.
// It records a training micro-batch's statistics in its router when its backward runs,
// so a micro-batch counts once even when activation recomputation runs its forward twice.
type routeFn struct {
	r      *Router
	logits []float64 // [N, E]
	choice *routerChoice
	loss   *routerLoss // nil: none
	scale  float64
	train  bool // the pass is training: its backward records statistics
}

func (f *routeFn) Forward(in []*tensor.Tensor) []*tensor.Tensor {
	c := f.choice
	return []*tensor.Tensor{fromHost(in[0], c.finalProbs(), c.n, c.e)}
}

func (f *routeFn) Backward(gy []*tensor.Tensor) []*tensor.Tensor {
	c := f.choice
	g := tensor.ToSlice[float64](gy[0])
	gl := make([]float64, len(g))
	c.backward(g, gl)
	if f.loss != nil {
		f.loss.backward(f.logits, gl, f.scale)
	}
	if f.train {
		f.r.record(c, f.loss)
	}
	return []*tensor.Tensor{fromHost(gy[0], gl, c.n, c.e)}
}

// allReduceHost sums v over group (a copy on every rank) through a float32 tensor on
// dev; token counts stay exact up to 2²⁴. On a group of one it returns v.
// It panics with the *parallel.Error if communication fails, as the TP mappings do.
func allReduceHost(p *Pass, dev *tensor.Device, group sumGroup, v []float64) []float64 {
	if group.Size() == 1 || len(v) == 0 {
		return v
	}
	t := tensor.FromSlice(dev, toFloat32(v), len(v))
	if err := group.AllReduce(p.Ctx, t, parallel.Sum); err != nil {
		panic(err)
	}
	return tensor.ToSlice[float64](t)
}

// fromHost returns v as a tensor of the given shape on like's device, F64 if like is,
// else F32.
func fromHost(like *tensor.Tensor, v []float64, shape ...int) *tensor.Tensor {
	if like.DType() == tensor.F64 {
		return tensor.FromSlice(like.Device(), v, shape...)
	}
	return tensor.FromSlice(like.Device(), toFloat32(v), shape...)
}

// toFloat32 converts v.
func toFloat32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}
