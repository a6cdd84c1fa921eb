package main

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"

	"megago"
)

// run calls dispatch as main does and returns its output and exit status.
func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = dispatch(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestVersion(t *testing.T) {
	stdout, _, err := run(t, "version")
	if err != nil {
		t.Fatalf("megago version: %v", err)
	}
	for _, want := range []string{megago.Version, runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH} {
		if !strings.Contains(stdout, want) {
			t.Errorf("megago version printed %q, want it to contain %q", stdout, want)
		}
	}
}

func TestHelpListsCommands(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}} {
		stdout, _, err := run(t, args...)
		if err != nil {
			t.Fatalf("megago %s: %v", strings.Join(args, " "), err)
		}
		for _, c := range commands {
			if !strings.Contains(stdout, "\t"+c.name+" ") {
				t.Errorf("megago %s does not list %q:\n%s", strings.Join(args, " "), c.name, stdout)
			}
		}
		if !strings.Contains(stdout, "version") {
			t.Errorf("megago %s does not list version:\n%s", strings.Join(args, " "), stdout)
		}
	}
}

// TestHelpEveryCommand checks that every registered command answers
// "megago help NAME" with its usage, which requires its run function to call
// parseFlags before doing anything else.
func TestHelpEveryCommand(t *testing.T) {
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			stdout, _, err := run(t, "help", c.name)
			if err != nil {
				t.Fatalf("megago help %s: %v", c.name, err)
			}
			if want := "usage: megago " + c.name; !strings.HasPrefix(stdout, want) {
				t.Errorf("megago help %s printed %q, want it to start with %q", c.name, stdout, want)
			}
			if c.summary == "" || strings.HasSuffix(c.summary, ".") {
				t.Errorf("summary %q: want one line without a final period", c.summary)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		mention string // a word the error message must contain
	}{
		{"no command", nil, "no command"},
		{"unknown command", []string{"frobnicate"}, "frobnicate"},
		{"unknown flag", []string{"version", "-frobnicate"}, "frobnicate"},
		{"extra argument", []string{"version", "frobnicate"}, "frobnicate"},
		{"help for unknown command", []string{"help", "frobnicate"}, "frobnicate"},
		{"help with two commands", []string{"help", "version", "help"}, "at most one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := run(t, tt.args...)
			if err == nil {
				t.Fatalf("megago %s succeeded, want an error", strings.Join(tt.args, " "))
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("error %q does not mention %q", err, tt.mention)
			}
			if code := exitCode(err); code != 2 {
				t.Errorf("exit status %d, want 2", code)
			}
		})
	}
}

func TestNoCommandPrintsUsageToStderr(t *testing.T) {
	stdout, stderr, _ := run(t)
	if stdout != "" {
		t.Errorf("megago with no arguments wrote %q to stdout, want nothing", stdout)
	}
	if !strings.Contains(stderr, "version") {
		t.Errorf("megago with no arguments wrote %q to stderr, want the command list", stderr)
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"success", nil, 0},
		{"usage error", &usageError{errors.New("bad")}, 2},
		{"wrapped usage error", errors.Join(errors.New("ctx"), &usageError{errors.New("bad")}), 2},
		{"other error", errors.New("disk full"), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := exitCode(tt.err); got != tt.want {
				t.Errorf("exitCode(%v) = %d, want %d", tt.err, got, tt.want)
			}
		})
	}
}
