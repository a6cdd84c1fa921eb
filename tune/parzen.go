package tune

import (
	"math"
	"math/rand/v2"
)

// parzen is a Parzen estimator over a search space's unit cube (see TPE): a weighted
// mixture of product kernels, one per observation and one prior. A point has one
// coordinate per flag: a range's position in [0, 1], a list's value index.
type parzen struct {
	cats  []int // per flag: the number of values of a list, 0 for a range
	comps []kernel
}

// kernel is one component of a parzen: per flag, a normal truncated to [0, 1]
// (mu, sigma) for a range, or the probabilities of a list's values.
type kernel struct {
	weight float64 // normalised over the components
	mu     []float64
	sigma  []float64
	probs  [][]float64 // [flag][value], nil for a range
}

// newParzen returns the estimator of the observations xs (unit-cube points, oldest
// first, weighted by tpeWeights) and the prior: see TPE for the bandwidths and weights.
func newParzen(params []Param, xs [][]float64) *parzen {
	n, d := len(xs), len(params)
	w := tpeWeights(n)
	pz := &parzen{cats: make([]int, d)}
	for i, p := range params {
		pz.cats[i] = len(p.Values)
	}
	sigma := 0.2 * math.Pow(float64(max(n, 1)), -1/float64(d+4))
	sigma = min(max(sigma, 1/min(100, float64(n+2))), 1)
	catPrior := tpePriorWeight / float64(n+1)
	for k, x := range xs {
		pz.comps = append(pz.comps, pz.kernel(w[k], x, sigma, catPrior))
	}
	pz.comps = append(pz.comps, pz.kernel(tpePriorWeight, nil, 1, catPrior))
	total := 0.0
	for _, c := range pz.comps {
		total += c.weight
	}
	for k := range pz.comps {
		pz.comps[k].weight /= total
	}
	return pz
}

// kernel returns the component centred on x with bandwidth sigma on ranges and
// weight catPrior on each list value, or, for x nil, the prior: centred at 1/2 and
// uniform on lists.
func (pz *parzen) kernel(weight float64, x []float64, sigma, catPrior float64) kernel {
	d := len(pz.cats)
	c := kernel{weight: weight, mu: make([]float64, d), sigma: make([]float64, d), probs: make([][]float64, d)}
	for i, m := range pz.cats {
		if m == 0 {
			c.mu[i], c.sigma[i] = 0.5, sigma
			if x != nil {
				c.mu[i] = x[i]
			}
			continue
		}
		c.probs[i] = make([]float64, m)
		sum := 0.0
		for j := range m {
			c.probs[i][j] = catPrior
			if x != nil && int(x[i]) == j {
				c.probs[i][j]++
			}
			sum += c.probs[i][j]
		}
		for j := range m {
			c.probs[i][j] /= sum
		}
	}
	return c
}

// sample draws a point: a component by weight, then each coordinate from its kernel
// (a truncated normal by its inverse distribution function).
func (pz *parzen) sample(rng *rand.Rand) []float64 {
	c := pz.comps[pick(rng, func(k int) float64 { return pz.comps[k].weight }, len(pz.comps))]
	x := make([]float64, len(pz.cats))
	for i, m := range pz.cats {
		if m > 0 {
			x[i] = float64(pick(rng, func(j int) float64 { return c.probs[i][j] }, m))
			continue
		}
		lo, hi := normalCDF(-c.mu[i]/c.sigma[i]), normalCDF((1-c.mu[i])/c.sigma[i])
		p := lo + rng.Float64()*(hi-lo)
		x[i] = min(max(c.mu[i]+c.sigma[i]*math.Sqrt2*math.Erfinv(2*p-1), 0), 1)
	}
	return x
}

// pick returns an index in [0, n) drawn with probabilities p(i), which sum to 1.
func pick(rng *rand.Rand, p func(int) float64, n int) int {
	u := rng.Float64()
	for i := range n - 1 {
		if u -= p(i); u < 0 {
			return i
		}
	}
	return n - 1
}

// logPDF returns the log of the density at x (a point of the unit cube).
func (pz *parzen) logPDF(x []float64) float64 {
	terms := make([]float64, len(pz.comps))
	for k, c := range pz.comps {
		lp := math.Log(c.weight)
		for i, m := range pz.cats {
			if m > 0 {
				lp += math.Log(c.probs[i][int(x[i])])
				continue
			}
			z := (x[i] - c.mu[i]) / c.sigma[i]
			mass := normalCDF((1-c.mu[i])/c.sigma[i]) - normalCDF(-c.mu[i]/c.sigma[i])
			lp += -z*z/2 - math.Log(c.sigma[i]*math.Sqrt(2*math.Pi)*mass)
		}
		terms[k] = lp
	}
	top := math.Inf(-1)
	for _, t := range terms {
		top = max(top, t)
	}
	sum := 0.0
	for _, t := range terms {
		sum += math.Exp(t - top)
	}
	return top + math.Log(sum)
}

// normalCDF is the standard normal distribution function Φ.
func normalCDF(z float64) float64 { return math.Erfc(-z/math.Sqrt2) / 2 }
