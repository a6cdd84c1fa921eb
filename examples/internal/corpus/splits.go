package corpus

import (
	"fmt"
	"strings"

	"megago/data"
	"megago/examples/internal/settings"
)

// Megatron's per-split data paths: --train-data-path, --valid-data-path and
// --test-data-path each give one split its own blend of datasets, each used whole
// (--split does not apply). The examples train and validate; the test path is
// checked and otherwise unused.

// wholeSplit is the --split that gives all of a source to one split.
var wholeSplit = [3]string{data.SplitTrain: "1,0,0", data.SplitValid: "0,1,0", data.SplitTest: "0,0,1"}

// splitPrefixes returns the prefixes of the training and validation paths, nil without
// per-split paths.
func splitPrefixes(c *settings.Common) map[data.Split][]string {
	if len(c.TrainDataPath) == 0 {
		return nil
	}
	train, _, _ := settings.ParseBlend(c.TrainDataPath) // checked with the flags
	valid, _, _ := settings.ParseBlend(c.ValidDataPath)
	return map[data.Split][]string{data.SplitTrain: train, data.SplitValid: valid}
}

// splitAbout says in one line where the splits come from.
func splitAbout(c *settings.Common) string {
	about := "--train-data-path " + strings.Join(c.TrainDataPath, " ")
	if len(c.ValidDataPath) > 0 {
		about += ", --valid-data-path " + strings.Join(c.ValidDataPath, " ")
	}
	return about
}

// BlendSplit builds n samples of split part from sources (Sources' result for c) with
// Blend: the whole --data-path blend cut by --split, or the blend of that split's own
// path, each source used whole. build gets the source, the --split to cut it with and
// the number of samples (0: one epoch).
func BlendSplit[S any](c *settings.Common, sources []*data.IndexedDataset, part data.Split, n int,
	build func(src *data.IndexedDataset, split string, samples int) (data.Dataset[S], error)) (data.Dataset[S], error) {
	split, weights := c.Split, []float64(nil)
	if perSplit := splitPrefixes(c); perSplit == nil {
		_, weights, _ = c.Blend()
	} else {
		words := map[data.Split][]string{data.SplitTrain: c.TrainDataPath, data.SplitValid: c.ValidDataPath}[part]
		if len(words) == 0 {
			return nil, fmt.Errorf("no --%s-data-path for the %s samples", part, part)
		}
		_, weights, _ = settings.ParseBlend(words)
		first := 0
		if part == data.SplitValid {
			first = len(perSplit[data.SplitTrain])
		}
		sources, split = sources[first:first+len(perSplit[part])], wholeSplit[part]
	}
	return Blend(sources, weights, n, func(_ int, src *data.IndexedDataset, samples int) (data.Dataset[S], error) {
		return build(src, split, samples)
	})
}
