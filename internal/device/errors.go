package device

import (
	"errors"
	"fmt"
	"strings"

	"megago/cuda"
)

// maxDirs is how many of the folders searched the short form names before "and N more".
const maxDirs = 4

// noDevice is the short form of an error that wraps cuda.ErrNoDevice: at most three
// lines, of which the first says what failed.
type noDevice struct {
	msg string
	err error // the full error, for errors.Is and errors.As
}

func (e *noDevice) Error() string { return e.msg }
func (e *noDevice) Unwrap() error { return e.err }

// short returns err, said shortly when it means "no usable GPU" (it wraps
// cuda.ErrNoDevice), prefixed with what: for a library that could not be found, the
// file names looked for, the folders looked in (the first maxDirs) and the last reason a
// file failed to open; then where to point the search, or how to run without a GPU.
func short(what string, err error) error {
	if !errors.Is(err, cuda.ErrNoDevice) {
		return fmt.Errorf("%s: %w", what, err)
	}
	hint := fmt.Sprintf("  (%s=DIR adds a folder to the search; --device cpu runs without a GPU)", cuda.EnvLibDirs)
	var le *cuda.LoadError
	if !errors.As(err, &le) || len(le.Missing) > 0 {
		return &noDevice{msg: fmt.Sprintf("%s: no usable GPU: %s\n%s", what, firstLine(innermost(err)), hint), err: err}
	}
	where := "  looked"
	if len(le.Dirs) > 0 {
		where += " in " + listShort(le.Dirs, maxDirs) + ","
	}
	where += " and through the system loader"
	if n := len(le.Attempts); n > 0 {
		a := le.Attempts[n-1]
		where += fmt.Sprintf("; %s: %s", a.Path, firstLine(a.Err.Error()))
	}
	msg := fmt.Sprintf("%s: no usable GPU: the CUDA %s library was not found (looked for %s)\n%s\n%s",
		what, le.Library, strings.Join(le.Files, ", "), where, hint)
	return &noDevice{msg: msg, err: err}
}

// innermost returns the message of err without the prefixes its wrappers added: the
// text of the deepest error in its Unwrap chain that is not ErrNoDevice itself, or
// err's own text.
func innermost(err error) string {
	msg := err.Error()
	for e := errors.Unwrap(err); e != nil && e != cuda.ErrNoDevice; e = errors.Unwrap(e) {
		msg = e.Error()
	}
	return msg
}

// firstLine returns s up to its first line break.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// listShort joins the first n of items, then says how many more there are.
func listShort(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s (and %d more)", strings.Join(items[:n], ", "), len(items)-n)
}
