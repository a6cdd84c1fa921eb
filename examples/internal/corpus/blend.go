package corpus

import "megago/data"

// Blend builds the samples of one split: with one source, build's dataset of n samples
// of it; with several, build's dataset of each source's share of n, blended by weights
// (nil: equal) with Megatron's BlendedDataset. build gets the source's index, the
// source and its number of samples.
func Blend[S any](sources []*data.IndexedDataset, weights []float64, n int,
	build func(i int, src *data.IndexedDataset, samples int) (data.Dataset[S], error)) (data.Dataset[S], error) {
	counts := []int{n}
	if len(sources) > 1 {
		if weights == nil {
			weights = make([]float64, len(sources))
			for i := range weights {
				weights[i] = 1
			}
		}
		var err error
		if counts, _, err = data.BlendSizes(weights, n); err != nil {
			return nil, err
		}
	}
	parts := make([]data.Dataset[S], len(sources))
	for i, src := range sources {
		ds, err := build(i, src, counts[i])
		if err != nil {
			return nil, err
		}
		parts[i] = ds
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	return data.NewBlendedDataset(parts, weights, n)
}
