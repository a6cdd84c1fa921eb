package nn

import (
	"fmt"

	"megago/tensor"
)

// This is a minimal router (softmax over the top-k logits, as Mixtral): the full router
// (aux losses, sigmoid scores, pre-softmax, expert bias, capacity) replaces this file.

// Router is a mixture-of-experts layer's gate: it scores every token against the E
// experts with a linear map and routes it to the TopK highest.
type Router struct {
	Weight *Param // [E, C], replicated over TP
	// ExpertBias [E] (fp32), added to the scores used for choosing experts; nil without
	// aux-loss-free balancing.
	ExpertBias *tensor.Tensor

	topK int
}

// Routing is a router's decision for the N = B·T tokens of its input, in row-major
// order.
type Routing struct {
	// Probs [N, E] weights each token's chosen experts' outputs: 0 where the token is not
	// routed (or dropped). Differentiable.
	Probs *tensor.Tensor
	// Map [N·E] says whether token n goes to expert e (at n·E+e), after capacity
	// dropping and padding.
	Map []bool
	// TokensPerExpert [E] counts the tokens routed to each expert before dropping.
	TokensPerExpert []int
}

// NewRouter creates name.weight [E, C]. It panics if the configuration has no experts or
// TopK exceeds them.
func NewRouter(b *Builder, name string, cfg TransformerConfig) *Router {
	cfg = cfg.Defaults()
	e, k := cfg.MoE.NumExperts, cfg.MoE.TopK
	if k == 0 {
		k = 2
	}
	if e <= 0 || k > e {
		panic(fmt.Sprintf("nn: router %s: top %d of %d experts", name, k, e))
	}
	w := newParam(b, name+".weight", tensor.Shape{e, cfg.Hidden}, -1, Normal(cfg.InitStd))
	w.SequenceParallel = b.SequenceParallel // each TP rank routes its own tokens
	return &Router{Weight: w, topK: k}
}

// Params returns the router's weight.
func (r *Router) Params() []*Param { return []*Param{r.Weight} }

// Route routes the tokens of x [B, T, C] ([B, T/tp, C] under sequence parallelism): each
// token to the TopK experts of highest logit x·Wᵀ (computed in fp32, or fp64 for an fp64
// x; ties go to the lower expert), weighted by the softmax over those TopK logits.
func (r *Router) Route(p *Pass, x *tensor.Tensor) Routing {
	e, c := r.Weight.Tensor.Dim(0), r.Weight.Tensor.Dim(1)
	n := x.Numel() / c
	dt := tensor.F32
	if x.DType() == tensor.F64 {
		dt = tensor.F64
	}
	logits := tensor.MatMulT(x.Reshape(n, c).Cast(dt), r.Weight.Tensor.Cast(dt), false, true) // [N, E]
	scores := tensor.ToSlice[float64](logits)
	if r.ExpertBias != nil {
		bias := tensor.ToSlice[float64](r.ExpertBias)
		for i := range scores {
			scores[i] += bias[i%e]
		}
	}
	rt := Routing{Map: make([]bool, n*e), TokensPerExpert: make([]int, e)}
	masked := make([]float32, n*e) // 1 where not chosen
	for t := range n {
		row := scores[t*e : (t+1)*e]
		for _, j := range topIndices(row, r.topK) {
			rt.Map[t*e+j] = true
			rt.TokensPerExpert[j]++
		}
		for j := range e {
			if !rt.Map[t*e+j] {
				masked[t*e+j] = 1
			}
		}
	}
	mask := tensor.FromSlice(x.Device(), masked, n, e)
	rt.Probs = tensor.Softmax(logits, tensor.SoftmaxOptions{Mask: mask}) // [N, E]
	return rt
}

// topIndices returns the indices of the k largest values of row, ties to the lower
// index.
func topIndices(row []float64, k int) []int {
	chosen := make([]int, 0, k)
	taken := make([]bool, len(row))
	for range k {
		best := -1
		for j, v := range row {
			if !taken[j] && (best < 0 || v > row[best]) {
				best = j
			}
		}
		taken[best] = true
		chosen = append(chosen, best)
	}
	return chosen
}
