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

// routerLoss is one micro-batch's auxiliary losses: what their gradients need and their
// values for logging. Shapes as in moe_router_topk.go.
type routerLoss struct {
	n, e int
	// q [N, E] are the scores the load-balancing loss is taken of (softmax of the
	// logits, or their sigmoid normalized over all experts); sig [N, E] and sum [N] the
	// sigmoid and its sum plus sigmoidEps for the latter. nil without that loss.
	q, sig, sum []float64
	// w [N, E] is ∂(load-balancing loss)/∂q, the coefficient included.
	w []float64
	// lse [N] are the logits' log-sum-exp and zScale ∂(z-loss)/∂lse² per token (0: no
	// z-loss); softmax [N, E] is the logits' softmax.
	lse, softmax []float64
	zScale       float64
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
	l := &routerLoss{n: n, e: s.e}
	g := float64(r.group.Size())
	lb := s.lb
	if s.auxCoeff == 0 {
		lb = lbNone
	}
	var cnt, sumQ []float64 // per expert, or per (sequence, expert) for seq_aux_loss
	if lb != lbNone {
		l.balancingScores(s, logits)
		cnt, sumQ = l.countTokens(s, lb == lbSeq, b)
	}
	zsum := 0.0
	if s.zCoeff > 0 {
		l.lse, l.softmax = make([]float64, n), make([]float64, n*s.e)
		for i := range n {
			row := logits[i*s.e : (i+1)*s.e]
			l.lse[i] = softmaxInto(l.softmax[i*s.e:(i+1)*s.e], row)
			zsum += l.lse[i] * l.lse[i]
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
	k, ef := float64(s.k), float64(s.e)
	switch lb {
	case lbAux:
		tot := float64(n) * g
		l.aux = l.weigh(red[:s.e], red[s.e:2*s.e], ef*s.auxCoeff/(k*tot*tot), 0)
	case lbSeq:
		tot := float64(t) * g
		l.seqAux = l.weigh(red[:b*s.e], red[b*s.e:2*b*s.e], ef*s.auxCoeff/(k*tot*tot)/float64(b), t)
	case lbGlobal:
		red := allReduceHost(p, dev, r.globalGroup(), append(cnt, sumQ...))
		avg := r.accumulateGlobal(p.SampleOffset, red[:s.e])
		tot := float64(n) * float64(r.globalGroup().Size())
		l.globalAux = l.weigh(avg, red[s.e:], ef*s.auxCoeff/(k*tot*tot), 0)
	}
	return l
}

// balancingScores sets the scores of compute_routing_scores_for_aux_loss: softmax of
// the logits, or their sigmoid divided by its sum over the experts.
func (l *routerLoss) balancingScores(s routerSettings, logits []float64) {
	e := s.e
	l.q = make([]float64, len(logits))
	if s.kind != topKOfSigmoid {
		for i := range l.n {
			softmaxInto(l.q[i*e:(i+1)*e], logits[i*e:(i+1)*e])
		}
		return
	}
	l.sig, l.sum = make([]float64, len(logits)), make([]float64, l.n)
	for i := range l.n {
		sum := sigmoidEps
		for j := range e {
			l.sig[i*e+j] = sigmoid(logits[i*e+j])
			sum += l.sig[i*e+j]
		}
		l.sum[i] = sum
		for j := range e {
			l.q[i*e+j] = l.sig[i*e+j] / sum
		}
	}
}

// countTokens returns, per expert (perSeq false) or per sequence and expert (true, [b, E]),
// how many of this rank's tokens the top-k of the balancing scores route there (no
// expert bias, no dropping) and the sum of those scores.
func (l *routerLoss) countTokens(s routerSettings, perSeq bool, b int) (cnt, sumQ []float64) {
	e, groups := s.e, 1
	if perSeq {
		groups = b
	}
	cnt, sumQ = make([]float64, groups*e), make([]float64, groups*e)
	sel := make([]int, s.k)
	for i := range l.n {
		off := 0
		if perSeq {
			off = i / (l.n / b) * e
		}
		row := l.q[i*e : (i+1)*e]
		topK(row, sel)
		for _, j := range sel {
			cnt[off+j]++
		}
		for j, v := range row {
			sumQ[off+j] += v
		}
	}
	return cnt, sumQ
}

// weigh sets l.w to cnt·c, per expert ([E]) or, for seqLen > 0, per sequence and expert
// ([N/seqLen, E], token i in sequence i/seqLen), and returns the logged loss Σ sumQ·cnt·c.
func (l *routerLoss) weigh(cnt, sumQ []float64, c float64, seqLen int) float64 {
	e := l.e
	l.w = make([]float64, l.n*e)
	for i := range l.n {
		off := 0
		if seqLen > 0 {
			off = i / seqLen * e
		}
		for j := range e {
			l.w[i*e+j] = cnt[off+j] * c
		}
	}
	v := 0.0
	for i := range cnt {
		v += sumQ[i] * cnt[i] * c
	}
	return v
}

// backward adds to gl [N, E] scale times the gradient of the micro-batch's auxiliary
// losses with respect to the logits.
func (l *routerLoss) backward(gl []float64, scale float64) {
	e := l.e
	for i := range l.n {
		row := gl[i*e : (i+1)*e]
		if l.w != nil {
			w, q := l.w[i*e:(i+1)*e], l.q[i*e:(i+1)*e]
			if l.sig == nil { // q = softmax(logits)
				dot := 0.0
				for j := range e {
					dot += q[j] * w[j]
				}
				for j := range e {
					row[j] += scale * q[j] * (w[j] - dot)
				}
			} else { // q = σ / (Σσ + ε)
				sig, d := l.sig[i*e:(i+1)*e], l.sum[i]
				dot := 0.0
				for j := range e {
					dot += w[j] * sig[j]
				}
				for j := range e {
					row[j] += scale * (w[j]/d - dot/(d*d)) * sig[j] * (1 - sig[j])
				}
			}
		}
		if l.zScale != 0 { // z = zScale·Σ lse², ∂lse/∂logits = softmax
			sm := l.softmax[i*e : (i+1)*e]
			for j := range e {
				row[j] += scale * l.zScale * 2 * l.lse[i] * sm[j]
			}
		}
	}
}

// routeFn maps the logits [N, E] to the routing probabilities [N, E] (0 where not routed
// or dropped). Its backward also adds the gradients of the auxiliary losses, scaled by
// the pass's loss scale: Megatron's MoEAuxLossAutoScaler, which passes the
// probabilities through unchanged and back-propagates the scale into the attached loss.
// It records the micro-batch's statistics in its router when its backward runs, so a
// micro-batch counts once even when activation recomputation runs its forward twice.
type routeFn struct {
	r      *Router
	choice *routerChoice
	loss   *routerLoss // nil: none (not training)
	scale  float64
}

func (f *routeFn) Forward(in []*tensor.Tensor) []*tensor.Tensor {
	c := f.choice
	return []*tensor.Tensor{tensor.FromSlice(in[0].Device(), toFloat32(c.finalProbs()), c.n, c.e)}
}

func (f *routeFn) Backward(gy []*tensor.Tensor) []*tensor.Tensor {
	c := f.choice
	g := tensor.ToSlice[float64](gy[0])
	gl := make([]float64, len(g))
	c.backward(g, gl)
	if f.loss != nil {
		f.loss.backward(gl, f.scale)
	}
	f.r.record(c, f.loss)
	return []*tensor.Tensor{tensor.FromSlice(gy[0].Device(), toFloat32(gl), c.n, c.e)}
}

// allReduceHost sums v over group (a copy on every rank) through a float32 tensor on
// dev; token counts stay exact up to 2²⁴. On a group of one it returns v.
// It panics with the *parallel.Error if communication fails, as the TP mappings do.
func allReduceHost(p *Pass, dev *tensor.Device, group parallel.Comm, v []float64) []float64 {
	if group.Size() == 1 || len(v) == 0 {
		return v
	}
	t := tensor.FromSlice(dev, toFloat32(v), len(v))
	if err := group.AllReduce(p.Ctx, t, parallel.Sum); err != nil {
		panic(err)
	}
	return tensor.ToSlice[float64](t)
}

// toFloat32 converts v.
func toFloat32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}
