package tune

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"megago/internal/atomicfile"
)

// Rank returns the trials best first, in a new slice (trials is not modified): the
// trials that did not fail by the deepest rung they reached (the iteration of their
// last rung), then by Final, lowest first; a trial whose Final is NaN (a loss that
// diverged, or no rung reached) after every trial with a number, however deep; failed
// trials last. Ties are broken by ID, lowest first.
func Rank(trials []TrialResult) []TrialResult {
	out := slices.Clone(trials)
	slices.SortStableFunc(out, compareTrials)
	return out
}

// compareTrials is Rank's order: a key of (failed, NaN Final, -deepest rung, Final, ID).
func compareTrials(a, b TrialResult) int {
	key := func(t TrialResult) (failed, nan bool) {
		return t.State == StateFailed, t.State != StateFailed && math.IsNaN(t.Final)
	}
	af, an := key(a)
	bf, bn := key(b)
	if c := cmp.Or(compareBool(af, bf), compareBool(an, bn)); c != 0 {
		return c
	}
	if !af && !an {
		if c := cmp.Or(cmp.Compare(deepestRung(b), deepestRung(a)), cmp.Compare(a.Final, b.Final)); c != 0 {
			return c
		}
	}
	return cmp.Compare(a.ID, b.ID)
}

// compareBool orders false before true.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// deepestRung is the iteration of the last rung t reached, 0 if none.
func deepestRung(t TrialResult) int {
	if len(t.Rungs) == 0 {
		return 0
	}
	return t.Rungs[len(t.Rungs)-1].Iteration
}

// WriteTable writes the trials ranked (Rank) as an aligned plain-text table: rank, trial
// ID, the value of each axis's flag (floats as %.3g; blank where a trial lacks it), the
// validation loss at each rung iteration any trial reached (blank where a trial did not
// reach it), state and wall time; failed trials come last, without a rank, with the
// first line of their error. Without axes the columns are the flags of the trials'
// settings, in the order they first appear. It returns w's error.
func WriteTable(w io.Writer, trials []TrialResult, axes []Axis) error {
	ranked := Rank(trials)
	flags := axisFlags(ranked, axes)
	var rungs []int
	for _, t := range ranked {
		for _, r := range t.Rungs {
			if !slices.Contains(rungs, r.Iteration) {
				rungs = append(rungs, r.Iteration)
			}
		}
	}
	slices.Sort(rungs)

	header := append([]string{"rank", "trial"}, flags...)
	for _, it := range rungs {
		header = append(header, "loss@"+strconv.Itoa(it))
	}
	header = append(header, "state", "time")
	rows := [][]string{header}
	anyFailed := false
	for i, t := range ranked {
		rank := strconv.Itoa(i + 1)
		if t.State == StateFailed {
			rank, anyFailed = "-", true
		}
		row := []string{rank, strconv.Itoa(t.ID)}
		for _, f := range flags {
			row = append(row, settingCell(t.Settings, f))
		}
		for _, it := range rungs {
			row = append(row, rungCell(t.Rungs, it))
		}
		row = append(row, t.State, durationCell(t.Seconds))
		if t.State == StateFailed {
			row = append(row, shortError(t.Err, 80))
		}
		rows = append(rows, row)
	}
	if anyFailed {
		rows[0] = append(rows[0], "error")
	}
	// Numbers align right; the state, the error and text settings left.
	left := make([]bool, len(rows[0]))
	left[len(header)-2] = true
	if anyFailed {
		left[len(header)] = true
	}
	for j, f := range flags {
		for _, t := range ranked {
			if v, ok := settingValue(t.Settings, f); ok && !isNumericValue(v) {
				left[2+j] = true
			}
		}
	}
	return writeAligned(w, rows, left)
}

// axisFlags returns the flags of axes, or without axes those of the trials' settings
// in the order they first appear.
func axisFlags(trials []TrialResult, axes []Axis) []string {
	var flags []string
	for _, a := range axes {
		flags = append(flags, a.Flag)
	}
	if len(axes) > 0 {
		return flags
	}
	for _, t := range trials {
		for _, s := range t.Settings {
			if !slices.Contains(flags, s.Flag) {
				flags = append(flags, s.Flag)
			}
		}
	}
	return flags
}

// settingValue returns the value of flag in ss.
func settingValue(ss []Setting, flag string) (any, bool) {
	for _, s := range ss {
		if s.Flag == flag {
			return s.Value, true
		}
	}
	return nil, false
}

// settingCell formats the value of flag in ss compactly: %.3g for floats.
func settingCell(ss []Setting, flag string) string {
	v, ok := settingValue(ss, flag)
	if !ok {
		return ""
	}
	switch v := v.(type) {
	case float64:
		return strconv.FormatFloat(v, 'g', 3, 64)
	case float32:
		return strconv.FormatFloat(float64(v), 'g', 3, 32)
	}
	return fmt.Sprint(v)
}

// isNumericValue reports whether v is one of the number types a Setting holds.
func isNumericValue(v any) bool {
	switch v.(type) {
	case float64, float32, int, int64, int32:
		return true
	}
	return false
}

// rungCell is the validation loss at iteration it, or blank if the trial did not reach it.
func rungCell(rungs []RungLoss, it int) string {
	for _, r := range rungs {
		if r.Iteration == it {
			return strconv.FormatFloat(r.ValidLoss, 'f', 4, 64)
		}
	}
	return ""
}

// durationCell formats a wall time: "12.3s" under a minute, else "1m02s" or "1h02m03s".
func durationCell(seconds float64) string {
	switch {
	case math.IsNaN(seconds) || seconds < 0:
		return ""
	case seconds < 60:
		return strconv.FormatFloat(seconds, 'f', 1, 64) + "s"
	}
	s := int64(math.Round(seconds))
	if s < 3600 {
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh%02dm%02ds", s/3600, s/60%60, s%60)
}

// shortError is the first line of msg with its runs of blanks collapsed, cut to n runes
// with "…".
func shortError(msg string, n int) string {
	first, _, _ := strings.Cut(strings.TrimSpace(msg), "\n")
	r := []rune(strings.Join(strings.Fields(first), " "))
	if len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return string(r)
}

// writeAligned writes rows as columns two spaces apart, each as wide as its widest cell
// (in runes), aligned left where left says, else right; a line ends at its last cell.
func writeAligned(w io.Writer, rows [][]string, left []bool) error {
	width := make([]int, len(left))
	for _, row := range rows {
		for j, c := range row {
			width[j] = max(width[j], len([]rune(c)))
		}
	}
	var b strings.Builder
	for _, row := range rows {
		var line strings.Builder
		for j, c := range row {
			if j > 0 {
				line.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[j]-len([]rune(c)))
			if left[j] {
				line.WriteString(c + pad)
			} else {
				line.WriteString(pad + c)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteConfig writes the --config JSON file an example takes (examples/internal/settings:
// keys named like the flags, values JSON strings, numbers or booleans): the fixed
// settings, then best's settings, each flag once; best's value wins over a fixed one,
// and a later setting over an earlier one of the same flag. Flags are named as FlagName
// gives them (a Flag may be written with leading dashes or underscores). The file is written atomically (internal/atomicfile). It returns
// an error for a value JSON cannot hold or a flag cannot take: NaN, an infinity, or a
// type that is not a number, string or bool.
func WriteConfig(path string, best TrialResult, fixed []Setting) error {
	won := map[string]bool{}
	for _, s := range best.Settings {
		won[FlagName(s.Flag)] = true
	}
	var keys []string
	vals := map[string][]byte{}
	for i, s := range slices.Concat(fixed, best.Settings) {
		key := FlagName(s.Flag)
		if i < len(fixed) && won[key] {
			continue
		}
		v, err := configValue(s.Value)
		if err != nil {
			return fmt.Errorf("tune: writing %s: setting %s: %w", path, s.Flag, err)
		}
		if _, ok := vals[key]; !ok {
			keys = append(keys, key)
		}
		vals[key] = v
	}
	var b bytes.Buffer
	b.WriteString("{\n")
	for i, k := range keys {
		name, _ := json.Marshal(k)
		fmt.Fprintf(&b, "  %s: %s", name, vals[k])
		if i < len(keys)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("}\n")
	return atomicfile.WriteFile(path, b.Bytes())
}

// configValue is v as a JSON value a flag parses: a number (floats in Go's shortest
// form, which strconv.ParseFloat reads back exactly), a string or a boolean.
func configValue(v any) ([]byte, error) {
	switch v := v.(type) {
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%v is not a JSON number", v)
		}
	case float32:
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("%v is not a JSON number", v)
		}
	case int, int64, int32, string, bool:
	default:
		return nil, fmt.Errorf("value %v of type %T: want a number, string or bool", v, v)
	}
	return json.Marshal(v)
}
