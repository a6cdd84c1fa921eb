package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"

	"megago/data"
	"megago/tensor"
)

// The labelled task of --finetune-classify: snippets of the default corpus's files, each
// labelled with the top-level standard-library directory of its file ("crypto" for
// crypto/aes/gcm.go), for the files of --classify-packages. A snippet is a run of whole
// lines of one document (a top-level declaration), as many as fit in --seq-length tokens
// with [CLS] and [SEP] (a longer line is cut), laid out [CLS] snippet [SEP]; snippets
// under a quarter of that are left out. --split divides the files, in the corpus's
// shuffled order, into training and validation files (80/20 unless given), so validation
// snippets come from files the classifier never saw. Both sets take the classes in turn
// (balanced), so the majority baseline is 1/N.

// snippet is one labelled sample.
type snippet struct {
	tokens []int32 // without [CLS] and [SEP]
	class  int32
}

// classifyData is the labelled task.
type classifyData struct {
	tok          data.Tokenizer
	classes      []string
	train, valid []snippet // train in the order of training: shuffled epochs
	about        string
	trainCounts  []int // training snippets per class (one epoch)
	trainFiles   int
	validFiles   int
	sources      []*data.IndexedDataset
}

func (d *classifyData) Close() {
	for _, s := range d.sources {
		s.Close()
	}
}

// loadClassify builds the task from the default corpus. It needs trainSamples training
// samples and validSamples validation samples (the first ones of a fixed shuffled order).
func loadClassify(ctx context.Context, c *config, builder bool, log io.Writer) (*classifyData, error) {
	sources, tok, about, files, err := openSources(ctx, c, builder, log)
	if err != nil {
		return nil, err
	}
	d := &classifyData{tok: tok, classes: c.packages(), about: about, sources: sources}
	src := sources[0]
	class := map[string]int32{}
	for i, p := range d.classes {
		class[p] = int32(i)
	}
	var classFiles []string // the files of the classes, in corpus order
	docsOf := map[string][]int{}
	for i, f := range files {
		if _, ok := class[topDir(f)]; ok {
			if _, seen := docsOf[f]; !seen {
				classFiles = append(classFiles, f)
			}
			docsOf[f] = append(docsOf[f], i)
		}
	}
	w, err := data.ParseSplit(c.Split)
	if err != nil {
		d.Close()
		return nil, err
	}
	b := data.SplitBoundaries(w, len(classFiles))
	if b[1] == b[0] || b[2] == b[1] {
		d.Close()
		return nil, fmt.Errorf("--classify-packages %s: %d files, which --split %s leaves no training or no validation files of",
			c.ClassifyPackages, len(classFiles), c.Split)
	}
	d.trainFiles, d.validFiles = b[1]-b[0], b[2]-b[1]
	snips := func(fs []string) ([][]snippet, error) {
		var out []snippet
		for _, f := range fs {
			for _, doc := range docsOf[f] {
				var err error
				if out, err = appendSnippets(out, src, doc, class[topDir(f)], c.SeqLength-2); err != nil {
					return nil, err
				}
			}
		}
		return byClass(out, len(d.classes)), nil
	}
	train, err := snips(classFiles[b[0]:b[1]])
	if err != nil {
		d.Close()
		return nil, err
	}
	valid, err := snips(classFiles[b[1]:b[2]])
	if err != nil {
		d.Close()
		return nil, err
	}
	d.trainCounts = make([]int, len(d.classes))
	fewest := len(valid[0])
	for k := range d.classes {
		d.trainCounts[k] = len(train[k])
		fewest = min(fewest, len(valid[k]))
		if len(train[k]) == 0 || len(valid[k]) == 0 {
			d.Close()
			return nil, fmt.Errorf("--classify-packages: %s has no training or no validation snippets", d.classes[k])
		}
	}
	d.train = balanced(train, c.TrainSamplesNeeded(), c.Seed, 1)
	d.valid = balanced(valid, min(len(d.classes)*fewest, c.EvalIters*c.GlobalBatchSize), c.Seed, 2)
	return d, nil
}

// byClass returns the snippets of each class.
func byClass(s []snippet, classes int) [][]snippet {
	out := make([][]snippet, classes)
	for _, x := range s {
		out[x.class] = append(out[x.class], x)
	}
	return out
}

// balanced returns n samples taking the classes in turn (sample i is of class i mod N),
// each class's snippets in shuffled epochs: training sees every class as often, and
// validation holds as many snippets of each, so that always predicting one class scores
// 1/N.
func balanced(classes [][]snippet, n int, seed, stream uint64) []snippet {
	per := make([][]snippet, len(classes))
	for k, s := range classes {
		per[k] = epochs(s, (n+len(classes)-1)/len(classes), seed, stream<<8|uint64(k))
	}
	out := make([]snippet, n)
	for i := range out {
		out[i] = per[i%len(classes)][i/len(classes)]
	}
	return out
}

// topDir returns the top-level directory of a path relative to GOROOT/src ("crypto").
func topDir(path string) string { return strings.SplitN(path, "/", 2)[0] }

// appendSnippets appends the snippets of document doc of src, of at most n tokens each;
// it returns src's read error.
func appendSnippets(out []snippet, src data.TokenSource, doc int, class int32, n int) ([]snippet, error) {
	lo, hi := src.Document(doc)
	var cur []int32
	flush := func() {
		if len(cur) >= n/4 {
			out = append(out, snippet{tokens: cur, class: class})
		}
		cur = nil
	}
	for k := lo; k < hi; k++ {
		line, err := src.ReadTokens(nil, k, 0, src.SequenceLen(k))
		if err != nil {
			return nil, err
		}
		if len(cur)+len(line) > n {
			flush()
		}
		cur = append(cur, line[:min(len(line), n-len(cur))]...)
	}
	flush()
	return out, nil
}

// epochs returns n samples: s in a fresh shuffled order each epoch, each shuffle a
// PCG stream keyed by (seed, stream, epoch).
func epochs(s []snippet, n int, seed, stream uint64) []snippet {
	out := make([]snippet, 0, n)
	for e := uint64(0); len(out) < n && len(s) > 0; e++ {
		order := rand.New(rand.NewPCG(seed, stream<<32|e)).Perm(len(s))
		for _, i := range order[:min(len(order), n-len(out))] {
			out = append(out, s[i])
		}
	}
	return out
}

// classEntropy returns the entropy of the training snippets' classes in nats: the loss
// of predicting the class frequencies.
func (d *classifyData) classEntropy() float64 {
	n := 0
	for _, k := range d.trainCounts {
		n += k
	}
	h := 0.0
	for _, k := range d.trainCounts {
		if k > 0 {
			p := float64(k) / float64(n)
			h -= p * math.Log(p)
		}
	}
	return h
}

// tensors lays out the snippets ss as a micro-batch: [CLS] snippet [SEP]
// and padding to t tokens [B, T], the attention mask [B, T] and the labels [B].
func (d *classifyData) tensors(dev *tensor.Device, ss []snippet, t int) (ids, attend, labels *tensor.Tensor) {
	sp := d.tok.Special()
	b := len(ss)
	x, m, y := make([]int32, b*t), make([]int32, b*t), make([]int32, b)
	for i, s := range ss {
		row := append(append([]int32{sp.CLS}, s.tokens...), sp.SEP)
		for j := range t {
			x[i*t+j] = sp.Pad
			if j < len(row) {
				x[i*t+j], m[i*t+j] = row[j], 1
			}
		}
		y[i] = s.class
	}
	return tensor.FromSlice(dev, x, b, t), tensor.FromSlice(dev, m, b, t), tensor.FromSlice(dev, y, b)
}
