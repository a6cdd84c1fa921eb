package nn

import (
	"math"
	"slices"
	"sort"
)

// This file is the router's choice of experts, on the host in float64: the score
// function and top-k of Megatron's topk_routing_with_score_function, and the capacity
// dropping of apply_router_token_dropping. Shapes: N tokens of the micro-batch (this
// rank's), E experts, K = TopK; [N, E] slices are row-major with token n = b·T + t.

// scoreKind is how a router turns logits into probabilities.
type scoreKind uint8

const (
	softmaxOfTopK scoreKind = iota // top-k of the logits, then softmax over them (Mixtral)
	topKOfSoftmax                  // softmax over all experts, then top-k (PreSoftmax)
	topKOfSigmoid                  // sigmoid, top-k of sigmoid + bias, normalized if K > 1
)

// sigmoidEps is what Megatron adds to the sum of sigmoid scores before dividing by it.
const sigmoidEps = 1e-20

// routerChoice is one micro-batch's top-k routing before and after capacity dropping,
// with what the backward pass of the probabilities needs.
type routerChoice struct {
	n, e, k int
	kind    scoreKind
	// sel [N, K] are each token's chosen experts, in decreasing order of their selection
	// score (ties: lower expert index first).
	sel []int
	// scores [N, E] are what the probabilities are taken from: softmax over all experts
	// with PreSoftmax, the sigmoid of the logits with the sigmoid score function, and nil
	// for the softmax over the chosen logits (whose result probs holds).
	scores []float64
	// denom [N] is each token's sum of chosen sigmoid scores plus sigmoidEps (sigmoid
	// with K > 1 only).
	denom []float64
	// probs [N, E] are the routing probabilities before dropping (0 where not chosen).
	probs []float64
	// keep [N, E] is the routing map after capacity dropping and padding; without a
	// capacity it is the top-k map.
	keep []bool
	// tokens [E] counts the tokens routed to each expert before dropping.
	tokens []int
}

// chooseExperts computes the routing of logits [n, e] as Megatron's
// topk_routing_with_score_function does: softmax over the top-k logits (Mixtral), softmax
// over all experts then top-k (PreSoftmax), or sigmoid then top-k of sigmoid + bias (bias
// [e] or nil; only for choosing) normalized by the chosen scores' sum when k > 1.
func chooseExperts(s routerSettings, logits, bias []float64, n int) *routerChoice {
	e, k := s.e, s.k
	c := &routerChoice{n: n, e: e, k: k, kind: s.kind, sel: make([]int, n*k), probs: make([]float64, n*e), tokens: make([]int, e)}
	if s.kind != softmaxOfTopK {
		c.scores = make([]float64, n*e)
	}
	if s.kind == topKOfSigmoid && k > 1 {
		c.denom = make([]float64, n)
	}
	c.keep = make([]bool, n*e)
	choose := make([]float64, e) // scratch for the selection scores
	for i := range n {
		c.chooseRow(i, logits[i*e:(i+1)*e], bias, choose)
		for _, j := range c.sel[i*k : (i+1)*k] {
			c.tokens[j]++
			c.keep[i*e+j] = true
		}
	}
	return c
}

// chooseRow routes token i of logits row [E] (bias [E] or nil; choose [E] scratch).
func (c *routerChoice) chooseRow(i int, row, bias, choose []float64) {
	e, k := c.e, c.k
	sel, pr := c.sel[i*k:(i+1)*k], c.probs[i*e:(i+1)*e]
	switch c.kind {
	case topKOfSigmoid:
		sc := c.scores[i*e : (i+1)*e]
		for j, v := range row {
			sc[j] = sigmoid(v)
			choose[j] = sc[j]
			if bias != nil {
				choose[j] += bias[j]
			}
		}
		topK(choose, sel)
		sum := sigmoidEps
		for _, j := range sel {
			sum += sc[j]
		}
		for _, j := range sel {
			pr[j] = sc[j]
			if k > 1 {
				pr[j] /= sum
			}
		}
		if k > 1 {
			c.denom[i] = sum
		}
	case topKOfSoftmax:
		sc := c.scores[i*e : (i+1)*e]
		softmaxInto(sc, row)
		topK(sc, sel)
		for _, j := range sel {
			pr[j] = sc[j]
		}
	default:
		topK(row, sel)
		m, sum := row[sel[0]], 0.0
		for _, j := range sel {
			pr[j] = math.Exp(row[j] - m)
			sum += pr[j]
		}
		for _, j := range sel {
			pr[j] /= sum
		}
	}
}

// dropOverCapacity applies Megatron's apply_router_token_dropping to c: each expert
// keeps at most capacity = ⌈(N·K/E)·factor⌉ tokens, those of highest probability
// (dropPosition false) or the earliest routed ones (true), and with pad the map becomes
// the capacity mask itself, so every expert receives exactly capacity tokens, those
// not routed to it with probability 0. "Earliest" and ties follow Megatron's token order,
// sequence-major ([T, B]: position t of every sequence before position t+1), the tokens
// being those of x [B, T, C] (T this rank's part of the sequence); ties between equal
// probabilities go to the earlier token in that order. If capacity ≥ N nothing is dropped
// (and with pad every token goes to every expert, as in Megatron).
func (c *routerChoice) dropOverCapacity(factor float64, dropPosition, pad bool, b, t int) {
	n, e := c.n, c.e
	capacity := int(math.Ceil(float64(n*c.k) / float64(e) * factor))
	mask := make([]bool, n*e)
	if capacity > n {
		for i := range mask {
			mask[i] = true
		}
	} else {
		order := make([]int, n) // tokens in Megatron's order: m = t·B + b holds n = b·T + t
		for m := range order {
			order[m] = (m%b)*t + m/b
		}
		for j := range e {
			for _, i := range c.capacityOrder(order, j, dropPosition)[:capacity] {
				mask[i*e+j] = true
			}
		}
	}
	if !pad {
		for i := range mask {
			mask[i] = mask[i] && c.keep[i]
		}
	}
	c.keep = mask
}

// capacityOrder returns the tokens in the order expert j keeps them, given the tokens
// in Megatron's order: the routed ones first (in that order for dropPosition, else by
// decreasing probability, ties in that order), then the others in that order. This is
// a stable sort of all tokens by routed-ness or by probability: routed tokens have
// positive probabilities, and one that has 0 (an underflow) goes among the others.
func (c *routerChoice) capacityOrder(order []int, j int, dropPosition bool) []int {
	e := c.e
	first := func(i int) bool { return c.keep[i*e+j] && (dropPosition || c.probs[i*e+j] > 0) }
	out := make([]int, 0, len(order))
	for _, i := range order {
		if first(i) {
			out = append(out, i)
		}
	}
	if !dropPosition {
		sort.SliceStable(out, func(x, y int) bool { return c.probs[out[x]*e+j] > c.probs[out[y]*e+j] })
	}
	for _, i := range order {
		if !first(i) {
			out = append(out, i)
		}
	}
	return out
}

// finalProbs returns the routing probabilities after dropping, probs·keep.
func (c *routerChoice) finalProbs() []float64 {
	out := make([]float64, len(c.probs))
	for i, v := range c.probs {
		if c.keep[i] {
			out[i] = v
		}
	}
	return out
}

// backward adds to gl [N, E] the gradient of Σ g·finalProbs with respect to the logits,
// for g [N, E].
func (c *routerChoice) backward(g, gl []float64) {
	e, k := c.e, c.k
	gs := make([]float64, k) // gradient of each chosen probability (0 where dropped)
	for i := range c.n {
		sel, row := c.sel[i*k:(i+1)*k], gl[i*e:(i+1)*e]
		for a, j := range sel {
			gs[a] = 0
			if c.keep[i*e+j] {
				gs[a] = g[i*e+j]
			}
		}
		switch c.kind {
		case topKOfSigmoid: // p_j = σ_j / (Σ_chosen σ + ε) if K > 1, else σ_j
			sc := c.scores[i*e : (i+1)*e]
			dot, d := 0.0, 1.0
			if c.denom != nil {
				d = c.denom[i]
				for a, j := range sel {
					dot += gs[a] * sc[j]
				}
			}
			for a, j := range sel {
				row[j] += (gs[a]/d - dot/(d*d)) * sc[j] * (1 - sc[j])
			}
		case topKOfSoftmax: // p = softmax(logits) at the chosen experts
			sc := c.scores[i*e : (i+1)*e]
			dot := 0.0
			for a, j := range sel {
				dot += gs[a] * sc[j]
			}
			for j := range row {
				row[j] -= sc[j] * dot
			}
			for a, j := range sel {
				row[j] += sc[j] * gs[a]
			}
		default: // softmax over the chosen logits
			pr := c.probs[i*e : (i+1)*e]
			dot := 0.0
			for a, j := range sel {
				dot += gs[a] * pr[j]
			}
			for a, j := range sel {
				row[j] += pr[j] * (gs[a] - dot)
			}
		}
	}
}

// topK writes into sel the indices of the len(sel) largest values of v, largest first;
// ties go to the lower index (a stable sort of v in decreasing order).
func topK(v []float64, sel []int) {
	for a := range sel {
		best := -1
		for j, x := range v {
			if (best < 0 || x > v[best]) && !slices.Contains(sel[:a], j) {
				best = j
			}
		}
		sel[a] = best
	}
}

// softmaxInto sets dst to softmax(v) and returns log Σ exp(v).
func softmaxInto(dst, v []float64) (lse float64) {
	m := math.Inf(-1)
	for _, x := range v {
		m = max(m, x)
	}
	sum := 0.0
	for j, x := range v {
		dst[j] = math.Exp(x - m)
		sum += dst[j]
	}
	for j := range dst {
		dst[j] /= sum
	}
	return m + math.Log(sum)
}

// sigmoid is 1/(1+e^−x).
func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
