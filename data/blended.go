package data

import (
	"fmt"
	"math"
)

// Dataset is a random-access sequence of samples, such as a *GPTDataset (S = GPTSample).
type Dataset[S any] interface {
	// Len returns the number of samples.
	Len() int
	// ReadSample returns sample i, 0 ≤ i < Len(), or an error naming the dataset, the
	// sample and the offset where its tokens could not be read.
	ReadSample(i int) (S, error)
	// Sample is ReadSample for callers that cannot handle an error: it panics where
	// ReadSample returns one.
	Sample(i int) S
}

// blendMargin is Megatron's over-provisioning of each blended component.
const blendMargin = 1.005

// normaliseWeights returns w scaled to sum to 1, or an error if a weight is negative or
// not finite or they sum to 0.
func normaliseWeights(w []float64) ([]float64, error) {
	if len(w) == 0 {
		return nil, fmt.Errorf("data: blend needs at least one weight")
	}
	sum := 0.0
	for i, v := range w {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("data: blend weight %d = %v, want a non-negative number", i, v)
		}
		sum += v
	}
	if sum <= 0 {
		return nil, fmt.Errorf("data: blend weights %v sum to 0", w)
	}
	out := make([]float64, len(w))
	for i, v := range w {
		out[i] = v / sum
	}
	return out, nil
}

// BlendSizes returns, for a blend of target samples with weights w (normalised here),
// how many samples to build for each component, ceil(ceil(target·w_i)·1.005), and the
// blend's size, Σ ceil(target·w_i) (Megatron's rule).
func BlendSizes(w []float64, target int) (perComponent []int, total int, err error) {
	w, err = normaliseWeights(w)
	if err != nil {
		return nil, 0, err
	}
	perComponent = make([]int, len(w))
	for i, v := range w {
		n := math.Ceil(float64(target) * v)
		total += int(n)
		perComponent[i] = int(math.Ceil(n * blendMargin))
	}
	return perComponent, total, nil
}

// BlendIndices returns, for each of size blended samples, the component it comes from
// and that component's sample number, by Megatron's greedy rule: sample t goes to the
// first i maximising w_i·max(t, 1) − count_i, where count_i is how many samples
// component i has given so far; weights are normalised here. With w = [0.3, 0.7] and 10
// samples the components are 1,0,1,1,0,1,1,0,1,1 and the sample numbers
// 0,0,1,2,1,3,4,2,5,6.
func BlendIndices(w []float64, size int) (component []int16, sample []int64, err error) {
	w, err = normaliseWeights(w)
	if err != nil {
		return nil, nil, err
	}
	if len(w) > math.MaxInt16 {
		return nil, nil, fmt.Errorf("data: blend of %d components, at most %d", len(w), math.MaxInt16)
	}
	count := make([]int64, len(w))
	component = make([]int16, size)
	sample = make([]int64, size)
	for t := range size {
		tt := float64(max(t, 1))
		best, bestErr := 0, w[0]*tt-float64(count[0])
		for i := 1; i < len(w); i++ {
			if e := w[i]*tt - float64(count[i]); e > bestErr {
				best, bestErr = i, e
			}
		}
		component[t] = int16(best)
		sample[t] = count[best]
		count[best]++
	}
	return component, sample, nil
}

// BlendedDataset mixes component datasets in the proportions of their weights. It is
// safe for concurrent use when its components are.
type BlendedDataset[S any] struct {
	parts     []Dataset[S]
	component []int16
	sample    []int64
}

// NewBlendedDataset blends parts with weights w into size samples (BlendIndices). Build
// component i with at least BlendSizes' perComponent[i] samples; an error says which
// component is too small.
func NewBlendedDataset[S any](parts []Dataset[S], w []float64, size int) (*BlendedDataset[S], error) {
	if len(parts) != len(w) {
		return nil, fmt.Errorf("data: blend of %d datasets with %d weights", len(parts), len(w))
	}
	comp, samp, err := BlendIndices(w, size)
	if err != nil {
		return nil, err
	}
	need := make([]int64, len(parts))
	for t := range comp {
		need[comp[t]] = max(need[comp[t]], samp[t]+1)
	}
	for i, p := range parts {
		if int64(p.Len()) < need[i] {
			return nil, fmt.Errorf("data: blend component %d has %d samples, the blend of %d needs %d", i, p.Len(), size, need[i])
		}
	}
	return &BlendedDataset[S]{parts: parts, component: comp, sample: samp}, nil
}

// Len returns the number of blended samples.
func (b *BlendedDataset[S]) Len() int { return len(b.component) }

// Locate returns the component and the component's sample number of blended sample i.
func (b *BlendedDataset[S]) Locate(i int) (component, sample int) {
	return int(b.component[i]), int(b.sample[i])
}

// ReadSample returns blended sample i, or its component's error. It panics if i is not
// in [0, Len()).
func (b *BlendedDataset[S]) ReadSample(i int) (S, error) {
	return b.parts[b.component[i]].ReadSample(int(b.sample[i]))
}

// Sample returns blended sample i; it panics if i is not in [0, Len()) or where
// ReadSample returns an error.
func (b *BlendedDataset[S]) Sample(i int) S {
	return b.parts[b.component[i]].Sample(int(b.sample[i]))
}
