package corpus

import (
	"fmt"

	"megago/data"
)

// Blend builds the samples of one split: with one source, build's dataset of n samples
// of it; with several, build's dataset of each source's share of n, blended by weights
// with Megatron's BlendedDataset. build gets the source's index, the source and its
// number of samples (0: one epoch of the split).
//
// Without weights (nil), several sources are blended by size, as Megatron's
// BlendedMegatronDatasetBuilder does for a --data-path of prefixes only: each source is
// built for one epoch of its split, and weighted by the samples that epoch holds
// (len(dataset)). A run that needs more samples than those epochs hold, where Megatron's
// blend would end, goes on in the same proportions: each source is built again for its
// share of n (build is then called twice for it).
func Blend[S any](sources []*data.IndexedDataset, weights []float64, n int,
	build func(i int, src *data.IndexedDataset, samples int) (data.Dataset[S], error)) (data.Dataset[S], error) {
	if len(sources) == 1 {
		return build(0, sources[0], n)
	}
	if weights == nil {
		parts, sizes, err := buildAll(sources, nil, build)
		if err != nil {
			return nil, err
		}
		total := 0.0
		for _, s := range sizes {
			total += s
		}
		if total == 0 {
			return nil, fmt.Errorf("blending %d datasets by size: none of them holds a sample of this split", len(sources))
		}
		if float64(n) <= total {
			return data.NewBlendedDataset(parts, sizes, n)
		}
		weights = sizes
	}
	counts, _, err := data.BlendSizes(weights, n)
	if err != nil {
		return nil, err
	}
	parts, _, err := buildAll(sources, counts, build)
	if err != nil {
		return nil, err
	}
	return data.NewBlendedDataset(parts, weights, n)
}

// buildAll builds each source with counts[i] samples (nil: one epoch each) and returns
// the datasets and their sizes.
func buildAll[S any](sources []*data.IndexedDataset, counts []int,
	build func(i int, src *data.IndexedDataset, samples int) (data.Dataset[S], error)) ([]data.Dataset[S], []float64, error) {
	parts := make([]data.Dataset[S], len(sources))
	sizes := make([]float64, len(sources))
	for i, src := range sources {
		n := 0
		if counts != nil {
			n = counts[i]
		}
		ds, err := build(i, src, n)
		if err != nil {
			return nil, nil, err
		}
		parts[i], sizes[i] = ds, float64(ds.Len())
	}
	return parts, sizes, nil
}
