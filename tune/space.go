package tune

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Space is a search space: the flags a search sets, in the order of its file.
//
// Its JSON form is an object whose keys are the example's flag names (with or without
// the leading dashes; Megatron's underscores are accepted) and whose values are either a
// range or a list:
//
//	{
//	  "lr":              {"min": 1e-4, "max": 3e-2, "scale": "log", "points": 6},
//	  "lr-warmup-iters": {"min": 0, "max": 30, "type": "int", "points": 3},
//	  "weight-decay":    {"values": [0, 0.1]}
//	}
//
// A range has "min" < "max", a "scale" ("linear", the default, or "log", which needs
// min > 0), a "type" ("float", the default, or "int", whose bounds are integers) and,
// for grid sampling, "points" ≥ 2: the grid's values from min to max, evenly spaced
// on the scale. A list has "values": numbers, strings or booleans, all of one kind.
type Space struct {
	Params []Param
}

// Param is one searched flag: a range (Values nil) or a list of values.
type Param struct {
	Flag     string  // the flag's name without dashes, "lr"
	Min, Max float64 // the range's bounds, inclusive
	Log      bool    // the range is on a log scale
	Int      bool    // the range holds integers: its settings are int64
	Points   int     // grid points over the range (0: not given)
	Values   []any   // the list: float64, int64, string or bool, one kind
}

// reserved are the flags a search sets on every trial, which a space or the fixed
// flags must not set, with the reason.
var reserved = map[string]string{
	"train-iters":   "set by the search (--max-iters)",
	"exit-interval": "set by the search (the rungs)",
	"save":          "set by the search (each trial's checkpoints)",
	"load":          "set by the search (each trial's checkpoints)",
	"out-dir":       "set by the search (each trial's directory)",
	"check-only":    "set by the search (its checks)",
	"config":        "neither searched nor fixed: give its settings as flags",
}

// ReadSpace reads and checks the search space file at path (see Space).
func ReadSpace(path string) (*Space, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("search space: %w", err)
	}
	s, err := ParseSpace(b)
	if err != nil {
		return nil, fmt.Errorf("search space %s: %w", path, err)
	}
	return s, nil
}

// ParseSpace parses and checks a search space (see Space). Every problem is found
// before it returns: the error lists them all, one a line, each naming its flag.
func ParseSpace(b []byte) (*Space, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("not a JSON object of flags")
	}
	s := &Space{}
	var problems []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not valid JSON: %w", err)
		}
		key := tok.(string) // an object's keys are strings
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("not valid JSON: %w", err)
		}
		p, errs := parseParam(key, raw)
		if slices.ContainsFunc(s.Params, func(q Param) bool { return q.Flag == p.Flag }) {
			errs = append(errs, "given twice")
		}
		for _, e := range errs {
			problems = append(problems, fmt.Sprintf("--%s: %s", p.Flag, e))
		}
		s.Params = append(s.Params, p)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	if dec.More() {
		return nil, errors.New("not valid JSON: text after the object")
	}
	if len(s.Params) == 0 && len(problems) == 0 {
		problems = append(problems, "no flags to search")
	}
	if err := problemsError(problems); err != nil {
		return nil, err
	}
	return s, nil
}

// problemsError returns nil for no problems, the problem for one, and for several an
// error that lists them, one a line.
func problemsError(problems []string) error {
	switch len(problems) {
	case 0:
		return nil
	case 1:
		return errors.New(problems[0])
	}
	return fmt.Errorf("%d problems:\n\t%s", len(problems), strings.Join(problems, "\n\t"))
}

// FlagName returns a flag's name as a search records it: without leading dashes, with
// Megatron's underscores as hyphens.
func FlagName(key string) string {
	return strings.ReplaceAll(strings.TrimLeft(key, "-"), "_", "-")
}

// parseParam parses one flag's entry, returning its problems.
func parseParam(key string, raw json.RawMessage) (Param, []string) {
	p := Param{Flag: FlagName(key)}
	var errs []string
	if why, ok := reserved[p.Flag]; ok {
		errs = append(errs, why)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return p, append(errs, `want an object: {"min": ..., "max": ...} or {"values": [...]}`)
	}
	for k := range m {
		if !slices.Contains([]string{"min", "max", "scale", "type", "points", "values"}, k) {
			errs = append(errs, fmt.Sprintf("unknown key %q (keys: min, max, scale, type, points, values)", k))
		}
	}
	if v, ok := m["values"]; ok {
		for _, k := range []string{"min", "max", "scale", "type", "points"} {
			if _, ok := m[k]; ok {
				errs = append(errs, fmt.Sprintf("%q and \"values\" exclude each other", k))
			}
		}
		var err error
		if p.Values, err = parseValues(v); err != nil {
			errs = append(errs, err.Error())
		}
		return p, errs
	}
	return p, append(errs, p.parseRange(m)...)
}

// parseRange fills p's range from m, returning its problems.
func (p *Param) parseRange(m map[string]json.RawMessage) []string {
	var errs []string
	str := func(key, def string, allowed ...string) string {
		raw, ok := m[key]
		if !ok {
			return def
		}
		var s string
		if json.Unmarshal(raw, &s) != nil || !slices.Contains(allowed, s) {
			errs = append(errs, fmt.Sprintf("%q must be %s, got %s", key, strings.Join(quoteAll(allowed), " or "), raw))
		}
		return s
	}
	p.Log = str("scale", "linear", "linear", "log") == "log"
	p.Int = str("type", "float", "float", "int") == "int"
	num := func(key string) (float64, bool) {
		raw, ok := m[key]
		if !ok {
			errs = append(errs, fmt.Sprintf("a range needs %q (or give \"values\")", key))
			return 0, false
		}
		var x float64
		if err := json.Unmarshal(raw, &x); err != nil {
			errs = append(errs, fmt.Sprintf("%q must be a number, got %s", key, raw))
			return 0, false
		}
		if p.Int && x != math.Trunc(x) {
			errs = append(errs, fmt.Sprintf("%q must be an integer for \"type\": \"int\", got %s", key, raw))
		}
		return x, true
	}
	var okMin, okMax bool
	p.Min, okMin = num("min")
	p.Max, okMax = num("max")
	if raw, ok := m["points"]; ok {
		if err := json.Unmarshal(raw, &p.Points); err != nil || p.Points < 2 {
			errs = append(errs, fmt.Sprintf("\"points\" must be an integer ≥ 2, got %s", raw))
		}
	}
	switch {
	case !okMin || !okMax:
	case p.Min >= p.Max:
		errs = append(errs, fmt.Sprintf("empty range: min %g must be below max %g", p.Min, p.Max))
	case p.Log && p.Min <= 0:
		errs = append(errs, fmt.Sprintf("a log scale needs min > 0, got %g", p.Min))
	}
	return errs
}

// quoteAll returns each of ss in double quotes.
func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

// parseValues parses a list of values: numbers (int64 where every one is an integer
// written without a point or exponent, else float64), strings or booleans.
func parseValues(raw json.RawMessage) ([]any, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("\"values\" must be a list, got %s", raw)
	}
	if len(items) == 0 {
		return nil, errors.New("\"values\" is empty")
	}
	vals := make([]any, len(items))
	for i, it := range items {
		v, err := scalar(it)
		if err != nil {
			return nil, fmt.Errorf("\"values\"[%d]: %w", i, err)
		}
		vals[i] = v
	}
	kind := func(v any) string {
		switch v.(type) {
		case int64, float64:
			return "number"
		}
		return fmt.Sprintf("%T", v)
	}
	for i, v := range vals {
		if kind(v) != kind(vals[0]) {
			return nil, fmt.Errorf("\"values\" mix kinds: %s and %s (item %d)", kind(vals[0]), kind(v), i)
		}
	}
	if slices.ContainsFunc(vals, func(v any) bool { _, ok := v.(float64); return ok }) {
		for i, v := range vals {
			if n, ok := v.(int64); ok {
				vals[i] = float64(n)
			}
		}
	}
	return vals, nil
}

// scalar decodes one JSON number, string or boolean: a number written without a point
// or exponent is an int64, other numbers float64.
func scalar(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil && !strings.ContainsAny(x.String(), ".eE") {
			return n, nil
		}
		return x.Float64()
	case string, bool:
		return x, nil
	}
	return nil, fmt.Errorf("want a number, string or boolean, got %s", raw)
}

// Axes returns the space's flags for the plots: each with whether its scale is log.
func (s *Space) Axes() []Axis {
	axes := make([]Axis, len(s.Params))
	for i, p := range s.Params {
		axes[i] = Axis{Flag: p.Flag, Log: p.Log}
	}
	return axes
}

// Extremes returns the values a search checks the example accepts before any trial
// runs: the range's bounds, or every value of the list.
func (p Param) Extremes() []any {
	if p.Values != nil {
		return p.Values
	}
	if p.Int {
		return []any{int64(p.Min), int64(p.Max)}
	}
	return []any{p.Min, p.Max}
}

// Args returns the command-line arguments that give the example settings:
// "--flag value" each, booleans as "--flag=true".
func Args(settings []Setting) []string {
	var args []string
	for _, s := range settings {
		switch v := s.Value.(type) {
		case bool:
			args = append(args, fmt.Sprintf("--%s=%t", s.Flag, v))
		default:
			args = append(args, "--"+s.Flag, FormatValue(v))
		}
	}
	return args
}

// FormatValue writes a setting's value as a command-line word: floats in the shortest
// form that reads back exactly.
func FormatValue(v any) string {
	switch x := v.(type) {
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return fmt.Sprint(v)
}

// decodeSetting converts a setting read back from a results file (a JSON number is a
// float64 there) to p's type.
func (p Param) decodeSetting(v any) (any, error) {
	x, isNum := v.(float64)
	switch {
	case p.Values == nil && p.Int && isNum:
		return int64(x), nil
	case p.Values == nil && isNum:
		return x, nil
	case p.Values != nil:
		for _, want := range p.Values {
			if n, ok := want.(int64); ok && isNum && float64(n) == x || want == v {
				return want, nil
			}
		}
	}
	return nil, fmt.Errorf("--%s: recorded value %v is not in the search space", p.Flag, v)
}
