package nn

import (
	"fmt"

	"megago/tensor"
)

// BERTClassifier is a BERT encoder with a sequence-classification head, Hugging Face's
// BertForSequenceClassification: the pooler tanh(dense(first token)), dropout, then a
// linear layer over Classes classes; or one pipeline stage of it. It has no
// pre-training heads. Its parameters are named as BERT's (embedding.…, layers.<i>.…,
// final_norm.… for pre-LN, pooler.…), so a pre-trained BERT's weights load into it by
// name, plus classifier.weight [Classes, C] and classifier.bias [Classes].
type BERTClassifier struct {
	Encoder    *BERT      // the embeddings (first stage) and the stage's layers
	FinalNorm  *LayerNorm // [C]; last stage, pre-LN only
	Pooler     *Linear    // [C, C]; last stage
	Classifier *Linear    // [Classes, C]; last stage
	Classes    int

	// last maps the encoder's output to the stage's output: (*BERTClassifier).classify
	// on the last stage, else noClassify.
	last      func(m *BERTClassifier, p *Pass, x *tensor.Tensor) *tensor.Tensor
	finalNorm func(x *tensor.Tensor) *tensor.Tensor // FinalNorm's (pre-LN) or the identity
}

// NewBERTClassifier builds the part of a classifier over classes classes that stage
// holds (the zero Stage: the whole model). The pooler and the classifier are whole on
// every TP rank. It returns the configuration's validation error, and an error if
// classes < 2.
func NewBERTClassifier(b *Builder, cfg BERTConfig, classes int, stage Stage) (*BERTClassifier, error) {
	if classes < 2 {
		return nil, fmt.Errorf("nn: BERTClassifier: %d classes, want at least 2", classes)
	}
	if stage == (Stage{}) {
		stage = WholeModel(cfg.NumLayers)
	}
	encoder := stage
	encoder.PostProcess = false
	e, err := NewBERT(b, cfg, encoder)
	if err != nil {
		return nil, err
	}
	m := &BERTClassifier{Encoder: e, Classes: classes, last: noClassify}
	if !stage.PostProcess {
		return m, nil
	}
	m.last = (*BERTClassifier).classify
	c := e.Config.TransformerConfig
	if !c.PostLN {
		m.FinalNorm = NewNorm(b, "final_norm", c.Norm, c.Hidden, c.NormEps)
	}
	whole := *b // the head sees the first token, whole on every rank
	whole.SequenceParallel = false
	init := Normal(c.InitStd)
	m.Pooler = NewLinear(&whole, "pooler", c.Hidden, c.Hidden, LinearOptions{Bias: true, Init: init})
	m.Classifier = NewLinear(&whole, "classifier", c.Hidden, classes, LinearOptions{Bias: true, Init: init})
	m.finalNorm = optionalNorm(m.FinalNorm)
	return m, nil
}

// Params returns the stage's parameters.
func (m *BERTClassifier) Params() []*Param {
	ps := m.Encoder.Params()
	if m.Classifier != nil {
		if m.FinalNorm != nil {
			ps = append(ps, m.FinalNorm.Params()...)
		}
		ps = append(ps, m.Pooler.Params()...)
		ps = append(ps, m.Classifier.Params()...)
	}
	return ps
}

// Forward runs the stage on in (see BERTInput). It returns the stage's output hidden
// states [B, T, C] ([B, T/tp, C] under sequence parallelism) and, on the last stage, the
// class scores [B, Classes] (nil elsewhere).
func (m *BERTClassifier) Forward(p *Pass, in BERTInput) (hidden, logits *tensor.Tensor) {
	x := m.Encoder.Forward(p, in).Hidden
	return x, m.last(m, p, x)
}

// classify returns the class scores [B, Classes] of the encoder's output x: the final
// norm (pre-LN), the pooler of the first position, dropout and the classifier.
func (m *BERTClassifier) classify(p *Pass, x *tensor.Tensor) *tensor.Tensor {
	if m.FinalNorm != nil {
		beforeForward(m.FinalNorm)
	}
	beforeForward(m.Pooler, m.Classifier)
	x = m.finalNorm(x)
	c := m.Encoder.Config
	pooled := tensor.Tanh(m.Pooler.Forward(m.Encoder.region.firstPosition(p, x))) // [B, C]
	pooled = dropout(p, pooled, c.Dropout, "classifier.dropout", pooled.Shape(), []int{0, 0})
	return m.Classifier.Forward(pooled) // [B, Classes]
}

// noClassify is classify on a stage without the head: no scores.
func noClassify(*BERTClassifier, *Pass, *tensor.Tensor) *tensor.Tensor { return nil }

// Loss returns the mean cross entropy of logits [B, Classes] against labels [B] (-100
// is ignored).
func (m *BERTClassifier) Loss(logits, labels *tensor.Tensor) *tensor.Tensor {
	return tensor.CrossEntropy(logits, labels, tensor.CrossEntropyOptions{Ignore: true, IgnoreIndex: -100})
}
