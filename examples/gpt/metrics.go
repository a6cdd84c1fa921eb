package main

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
)

// metricsWriter writes one JSON object per line: a "train" record per iteration, a
// "valid" record per validation run and a "summary" record at the end, e.g.
//
//	{"kind":"train","iteration":10,"lm_loss":5.93,"lr":0.002,"grad_norm":0.81,...}
//
// Non-finite numbers (a skipped fp16 step's gradient norm) are written as null.
type metricsWriter struct {
	f   *os.File
	w   *bufio.Writer
	enc *json.Encoder
}

func newMetricsWriter(path string) (*metricsWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriter(f)
	return &metricsWriter{f: f, w: w, enc: json.NewEncoder(w)}, nil
}

// trainRecord is one iteration.
type trainRecord struct {
	Kind        string   `json:"kind"` // "train"
	Iteration   int      `json:"iteration"`
	Loss        float64  `json:"lm_loss"`
	LR          float64  `json:"lr"`
	GradNorm    *float64 `json:"grad_norm"`
	LossScale   float64  `json:"loss_scale"`
	Skipped     bool     `json:"skipped,omitempty"`
	Tokens      int64    `json:"tokens"` // consumed so far
	TokensPerS  float64  `json:"tokens_per_s"`
	TFLOPs      float64  `json:"model_tflops"` // model TFLOP/s of all ranks together
	IterSeconds float64  `json:"iteration_s"`
	ElapsedS    float64  `json:"elapsed_s"`
}

// validRecord is one validation run.
type validRecord struct {
	Kind       string  `json:"kind"` // "valid"
	Iteration  int     `json:"iteration"`
	Loss       float64 `json:"lm_loss"`
	Perplexity float64 `json:"perplexity"`
}

// finite returns &v, or nil for an infinity or NaN (JSON has neither).
func finite(v float64) *float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return nil
	}
	return &v
}

// Write appends one record.
func (m *metricsWriter) Write(rec any) error { return m.enc.Encode(rec) }

// Flush writes buffered records to the file.
func (m *metricsWriter) Flush() error { return m.w.Flush() }

func (m *metricsWriter) Close() error {
	err := m.w.Flush()
	if e := m.f.Close(); err == nil {
		err = e
	}
	return err
}
