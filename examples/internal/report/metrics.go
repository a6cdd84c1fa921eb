package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
)

// Metrics writes one JSON object per line: the examples write a "train" record per
// iteration and a "valid" record per validation run, e.g.
//
//	{"kind":"train","iteration":10,"lm_loss":5.93,"lr":0.002,"grad_norm":0.81,...}
//
// Non-finite numbers (a skipped fp16 step's gradient norm) are written as null.
type Metrics struct {
	f   *os.File
	w   *bufio.Writer
	enc *json.Encoder
}

// NewMetrics creates (or truncates) the file at path.
func NewMetrics(path string) (*Metrics, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriter(f)
	return &Metrics{f: f, w: w, enc: json.NewEncoder(w)}, nil
}

// Path returns the file's path.
func (m *Metrics) Path() string { return m.f.Name() }

// Write appends one record: any value encoding/json encodes, usually a Record.
func (m *Metrics) Write(rec any) error { return m.enc.Encode(rec) }

// Flush writes buffered records to the file.
func (m *Metrics) Flush() error { return m.w.Flush() }

// Close flushes and closes the file.
func (m *Metrics) Close() error {
	err := m.w.Flush()
	if e := m.f.Close(); err == nil {
		err = e
	}
	return err
}

// Record is a JSON object whose keys are written in the order given (encoding/json
// sorts a map's keys).
type Record []Field

// Field is one key of a Record. A float64 value that is infinite or NaN is written as
// null (JSON has neither).
type Field struct {
	Key   string
	Value any
}

// MarshalJSON writes the object.
func (r Record) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range r {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(f.Key)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		v := f.Value
		if x, ok := v.(float64); ok && (math.IsInf(x, 0) || math.IsNaN(x)) {
			v = nil
		}
		val, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		b.Write(val)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// ReadRecords reads a metrics file back, one map per line (numbers as float64, null as
// nil), for tests and tools.
func ReadRecords(path string) ([]map[string]any, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, rec)
	}
	return out, sc.Err()
}

// Losses returns the values of key in the records of kind ("train", "valid"), in order.
func Losses(recs []map[string]any, kind, key string) []float64 {
	var out []float64
	for _, r := range recs {
		if r["kind"] == kind {
			v, _ := r[key].(float64)
			out = append(out, v)
		}
	}
	return out
}
