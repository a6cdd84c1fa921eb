package nn

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"megago/tensor"
)

// GenerateOptions configures Generate. The zero value (with MaxNewTokens set) decodes
// greedily. Sampling applies, in Hugging Face's order, temperature, then top-k, then
// top-p to the logits of the true vocabulary (padded columns never take part).
type GenerateOptions struct {
	// MaxNewTokens is the most tokens generated per prompt; it must be ≥ 1.
	MaxNewTokens int
	// Temperature divides the logits before sampling. 0 means greedy decoding (the
	// argmax, lowest id on ties), the limit of sampling as the temperature goes to 0; a
	// tiny positive temperature gives the same tokens.
	Temperature float64
	// TopK keeps only the TopK most probable tokens (and any tied with the TopK-th);
	// 0 keeps all. TopK 1 gives greedy decoding's tokens (but for exact ties).
	TopK int
	// TopP keeps the smallest set of most probable tokens whose probability reaches TopP
	// (nucleus sampling: a token is kept while the tokens more probable than it hold less
	// than TopP); 0 and 1 keep all. A tiny TopP keeps only the most probable token.
	TopP float64
	// Seed keys the sampling randomness: the draw for prompt i at step s (the s-th new
	// token) depends only on (Seed, s, i), so every TP rank draws the same token and the
	// tokens of a prompt do not depend on the other prompts in the call.
	Seed uint64
	// EOD lists end-of-document ids: a sequence ends after it emits one of them (the id is
	// included in the result). Nil never ends early.
	EOD []int32
}

// Validate reports every option that cannot work, naming the fields.
func (o GenerateOptions) Validate() error {
	var errs []string
	if o.MaxNewTokens < 1 {
		errs = append(errs, fmt.Sprintf("MaxNewTokens = %d must be ≥ 1", o.MaxNewTokens))
	}
	if !(o.Temperature >= 0) || math.IsInf(o.Temperature, 1) {
		errs = append(errs, fmt.Sprintf("Temperature = %v must be finite and ≥ 0", o.Temperature))
	}
	if o.TopK < 0 {
		errs = append(errs, fmt.Sprintf("TopK = %d must be ≥ 0", o.TopK))
	}
	if !(o.TopP >= 0 && o.TopP <= 1) {
		errs = append(errs, fmt.Sprintf("TopP = %v must be in [0, 1]", o.TopP))
	}
	if len(errs) > 0 {
		return errors.New("nn: invalid GenerateOptions: " + strings.Join(errs, "; "))
	}
	return nil
}

// greedy reports whether o picks the argmax without drawing.
func (o GenerateOptions) greedy() bool { return o.Temperature == 0 }

// uniform returns the random number in [0, 1) for prompt row at step: element row of the
// stream keyed by (seed, "nn.Generate", step).
func (o GenerateOptions) uniform(step, row int) float64 {
	key := tensor.NewRNG(o.Seed).Named("nn.Generate").Fold(uint64(step)).Key()
	return tensor.RandomParams{Key: key, Dist: tensor.DistUniform, A: 0, B: 1}.Sample(uint64(row))
}

// checkLogits returns an error if logits [V] contain NaN or +Inf or are all −Inf.
func checkLogits(logits []float64) error {
	_, err := checkedArgmax(logits)
	return err
}

// checkedArgmax returns argmax(logits), the first largest, for logits [V] that
// checkLogits accepts, else checkLogits's error. A row of finite values (the usual one:
// not a banned id's −Inf) takes one pass over four interleaved lanes, each keeping its
// largest value and where it first was, about twice as fast as checkedArgmaxSerial (the
// engine's greedy requests read 50K logits each per step); any other row is left to
// checkedArgmaxSerial, which defines the result and the errors.
func checkedArgmax(logits []float64) (int, error) {
	if len(logits) < 4 {
		return checkedArgmaxSerial(logits)
	}
	m := [4]float64{logits[0], logits[1], logits[2], logits[3]}
	at := [4]int{0, 1, 2, 3}
	bad := 0.0 // NaN once a NaN or an infinity has been seen (x·0)
	n := len(logits) &^ 3
	for j := 4; j < n; j += 4 {
		x := logits[j : j+4 : j+4]
		bad += x[0]*0 + x[1]*0 + x[2]*0 + x[3]*0
		for l, v := range x {
			if v > m[l] {
				m[l], at[l] = v, j+l
			}
		}
	}
	for j := n; j < len(logits); j++ {
		bad += logits[j] * 0
		if logits[j] > m[0] {
			m[0], at[0] = logits[j], j
		}
	}
	if bad += m[0]*0 + m[1]*0 + m[2]*0 + m[3]*0; bad != 0 {
		return checkedArgmaxSerial(logits)
	}
	best := 0 // the lane whose largest value came first (+0 and −0 are equal, as in the serial loop)
	for l := 1; l < 4; l++ {
		if m[l] > m[best] || m[l] == m[best] && at[l] < at[best] {
			best = l
		}
	}
	return at[best], nil
}

// checkedArgmaxSerial is checkedArgmax in one plain pass: the first index whose value
// exceeds every earlier one, or the error for the first NaN or +Inf, or for a row that
// is all −Inf.
func checkedArgmaxSerial(logits []float64) (int, error) {
	best, m := 0, math.Inf(-1)
	for j, x := range logits {
		if !(x < math.Inf(1)) { // NaN or +Inf
			return 0, fmt.Errorf("logit of token %d is %v", j, x)
		}
		if x > m {
			best, m = j, x
		}
	}
	if math.IsInf(m, -1) {
		return 0, fmt.Errorf("every logit is -Inf")
	}
	return best, nil
}

// argmax returns the index of the first largest value.
func argmax(x []float64) int {
	best := 0
	for j, v := range x {
		if v > x[best] {
			best = j
		}
	}
	return best
}

// probabilities returns the sampling distribution of logits [V] under o: softmax of
// logits/Temperature restricted to the top-k and then the top-p tokens, renormalized
// (0 for removed tokens). It panics if o is greedy (Temperature 0).
func probabilities(logits []float64, o GenerateOptions) []float64 {
	if o.Temperature == 0 {
		panic("nn: probabilities: temperature 0 is greedy decoding")
	}
	m := logits[argmax(logits)]
	p := make([]float64, len(logits))
	for j, x := range logits {
		p[j] = math.Exp((x - m) / o.Temperature) // the argmax gets 1, so the sum is ≥ 1
	}
	if (o.TopK > 0 && o.TopK < len(p)) || (o.TopP > 0 && o.TopP < 1) {
		order := make([]int, len(p)) // token ids by decreasing probability, ties by id
		for j := range order {
			order[j] = j
		}
		sort.SliceStable(order, func(a, b int) bool { return p[order[a]] > p[order[b]] })
		if o.TopK > 0 && o.TopK < len(p) {
			kth := p[order[o.TopK-1]]
			for _, j := range order[o.TopK:] {
				if p[j] < kth {
					p[j] = 0
				}
			}
		}
		if o.TopP > 0 && o.TopP < 1 {
			total := sum(p)
			before := 0.0 // probability of the tokens ahead in order
			for _, j := range order {
				if before >= o.TopP*total {
					p[j] = 0
				}
				before += p[j]
			}
		}
	}
	total := sum(p)
	for j := range p {
		p[j] /= total
	}
	return p
}

func sum(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v
	}
	return s
}

// pick returns the token of distribution p [V] that the uniform number u in [0, 1)
// selects: the first id whose cumulative probability exceeds u (the last id with
// non-zero probability if rounding leaves u above the total).
func pick(p []float64, u float64) int {
	c, last := 0.0, 0
	for j, q := range p {
		if q == 0 {
			continue
		}
		c += q
		last = j
		if u < c {
			return j
		}
	}
	return last
}

// nextToken chooses the next token from logits [V] with options o and uniform number u.
// It returns checkLogits's error for logits it refuses; greedy, the check and the
// argmax are one pass.
func nextToken(logits []float64, o GenerateOptions, u float64) (int32, error) {
	if o.greedy() {
		id, err := checkedArgmax(logits)
		return int32(id), err
	}
	if err := checkLogits(logits); err != nil {
		return 0, err
	}
	return int32(pick(probabilities(logits, o), u)), nil
}
