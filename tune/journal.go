package tune

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"megago/internal/atomicfile"
)

// The results file (tune.jsonl) holds one JSON object a line, each appended and
// fsynced as it happens. The first records the search's settings:
//
//	{"event":"search","config":{"sampler":"random","seed":1,"rungs":[10,30,90],...}}
//
// and the others what happened to the trials, in order:
//
//	{"event":"trial","id":0,"settings":[{"flag":"lr","value":0.001}]}   decided: a new trial
//	{"event":"promote","id":0,"rung":1}                                 decided: continue to rung 1
//	{"event":"rung","id":0,"rung":0,"iteration":10,"valid_loss":5.1,"seconds":3.2,"curve":[[1,9.0],...]}
//	{"event":"failed","id":3,"rung":1,"error":"..."}
//	{"event":"stopped","id":2,"rung":0}                                 at the end: left below the last rung
//	{"event":"finished","id":0,"rung":2}                                reached the last rung
//
// A record cut short by a crash (the last line without its newline) is dropped when the
// file is opened again.

// Event kinds of the results file.
const (
	eventSearch   = "search"
	eventTrial    = "trial"
	eventPromote  = "promote"
	eventRung     = "rung"
	eventFailed   = "failed"
	eventStopped  = "stopped"
	eventFinished = "finished"
)

// record is one line of the results file.
type record struct {
	Event     string          `json:"event"`
	Config    json.RawMessage `json:"config,omitempty"` // eventSearch
	ID        int             `json:"id"`
	Settings  []jsonSetting   `json:"settings,omitempty"`   // eventTrial
	Rung      int             `json:"rung"`                 // the rung index (0-based) the event is about
	Iteration int             `json:"iteration,omitempty"`  // eventRung: the rung's iteration
	ValidLoss *float64        `json:"valid_loss,omitempty"` // eventRung: nil when not finite
	Seconds   float64         `json:"seconds,omitempty"`    // eventRung: the segment's wall time
	Curve     [][2]float64    `json:"curve,omitempty"`      // eventRung: the segment's [iteration, training loss]
	Error     string          `json:"error,omitempty"`      // eventFailed
}

// jsonSetting is a Setting in the results file.
type jsonSetting struct {
	Flag  string `json:"flag"`
	Value any    `json:"value"`
}

// journal appends records to the results file.
type journal struct {
	f *os.File
}

// openJournal opens the results file at path, creating it with a search record of
// config, or, when it exists, checking that its search record holds config and
// returning its other records. It returns an error naming the settings that differ.
func openJournal(path string, config any) (*journal, []record, error) {
	want, err := json.Marshal(config)
	if err != nil {
		return nil, nil, err
	}
	past, err := readJournal(path)
	if err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("results file: %w", err)
	}
	j := &journal{f: f}
	if len(past) == 0 {
		if err := atomicfile.SyncDir(filepath.Dir(path)); err != nil {
			f.Close()
			return nil, nil, err
		}
		if err := j.append(record{Event: eventSearch, Config: want}); err != nil {
			f.Close()
			return nil, nil, err
		}
		return j, nil, nil
	}
	if err := sameConfig(past[0].Config, want); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s was written by another search: %w (use another --out-dir, or the same settings to resume)", path, err)
	}
	return j, past[1:], nil
}

// readJournal returns the records of the results file at path (none if it does not
// exist), after cutting off a last line a crash left without its newline.
func readJournal(path string) ([]record, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("results file: %w", err)
	}
	if end := bytes.LastIndexByte(b, '\n') + 1; end < len(b) {
		if err := os.Truncate(path, int64(end)); err != nil {
			return nil, fmt.Errorf("results file: dropping a record cut short: %w", err)
		}
		b = b[:end]
	}
	var recs []record
	for n, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var r record
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("results file %s:%d: %w", path, n+1, err)
		}
		if (len(recs) == 0) != (r.Event == eventSearch) {
			return nil, fmt.Errorf("results file %s:%d: the first record, and only it, must be the search's", path, n+1)
		}
		recs = append(recs, r)
	}
	return recs, nil
}

// sameConfig returns an error naming the keys whose values differ between the
// recorded and the wanted search settings (JSON objects).
func sameConfig(recorded, want []byte) error {
	var a, b map[string]any
	if err := json.Unmarshal(recorded, &a); err != nil {
		return fmt.Errorf("its search record: %w", err)
	}
	if err := json.Unmarshal(want, &b); err != nil {
		return err
	}
	var diff []string
	for k := range a {
		if _, ok := b[k]; !ok {
			b[k] = nil
		}
	}
	for k, v := range b {
		if !reflect.DeepEqual(a[k], v) {
			diff = append(diff, fmt.Sprintf("%s was %s, now %s", k, jsonText(a[k]), jsonText(v)))
		}
	}
	if len(diff) == 0 {
		return nil
	}
	slices.Sort(diff)
	return fmt.Errorf("settings differ: %s", strings.Join(diff, "; "))
}

// jsonText returns v as JSON.
func jsonText(v any) string {
	b, _ := json.Marshal(v) // v came from json.Unmarshal
	return string(b)
}

// append writes r as one line and fsyncs the file.
func (j *journal) append(r record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("results file: %w", err)
	}
	if _, err := j.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("results file: %w", err)
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("results file: %w", err)
	}
	return nil
}

// close closes the file.
func (j *journal) close() error { return j.f.Close() }

// finite returns &x, or nil when x is not finite (JSON has no NaN).
func finite(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

// lossOf returns a recorded loss, NaN for nil.
func lossOf(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// encodeSettings and decodeSettings convert settings to and from the results file,
// where numbers lose their int64/float64 distinction: s gives each flag's type.
func encodeSettings(settings []Setting) []jsonSetting {
	out := make([]jsonSetting, len(settings))
	for i, st := range settings {
		out[i] = jsonSetting{Flag: st.Flag, Value: st.Value}
	}
	return out
}

// decodeSettings returns recorded settings with their types of s.
func decodeSettings(s *Space, recorded []jsonSetting) ([]Setting, error) {
	if len(recorded) != len(s.Params) {
		return nil, fmt.Errorf("recorded %d settings, the search space has %d", len(recorded), len(s.Params))
	}
	out := make([]Setting, len(recorded))
	for i, r := range recorded {
		p := s.Params[i]
		if r.Flag != p.Flag {
			return nil, fmt.Errorf("recorded flag --%s where the search space has --%s", r.Flag, p.Flag)
		}
		v, err := p.decodeSetting(r.Value)
		if err != nil {
			return nil, err
		}
		out[i] = Setting{Flag: p.Flag, Value: v}
	}
	return out, nil
}
