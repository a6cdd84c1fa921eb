package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
)

func init() {
	register(command{
		name:    "help",
		summary: "show help for megago or one of its commands",
		usage: `megago help [command]

Help prints the list of commands, or with an argument that command's
description and flags.`,
		run: runHelp,
	})
}

// runHelp prints the command list, or the help of the command named in args
// by running it with -h (see parseFlags).
func runHelp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("help", flag.ContinueOnError)
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	switch fs.NArg() {
	case 0:
		printUsage(stdout)
		return nil
	case 1:
		c, ok := lookup(fs.Arg(0))
		if !ok {
			return &usageError{fmt.Errorf("unknown command %q; run 'megago help' for the list", fs.Arg(0))}
		}
		return c.run(ctx, []string{"-h"}, stdout, stderr) // flag.ErrHelp, which dispatch treats as success
	default:
		return &usageError{errors.New("help takes at most one command name")}
	}
}
