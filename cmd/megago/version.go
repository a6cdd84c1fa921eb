package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"

	"megago"
)

func init() {
	register(command{
		name:    "version",
		summary: "print megago's version, Go version and platform",
		usage: `megago version

Version prints megago's release version, the Go version it was built with
and the operating system and architecture it runs on, as in
"megago 0.1.0-dev (go1.26.0 linux/amd64)".`,
		run: runVersion,
	})
}

func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	_, err := fmt.Fprintln(stdout, versionLine())
	return err
}

// versionLine returns "megago VERSION (GOVERSION GOOS/GOARCH)".
func versionLine() string {
	return fmt.Sprintf("megago %s (%s %s/%s)", megago.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
