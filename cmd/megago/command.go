package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// A command is one megago subcommand. Each is registered once, from an init
// function in its own file; see the package documentation.
type command struct {
	name    string // the word after megago, such as "version"
	summary string // one line for the command list, lower case, no period
	usage   string // synopsis line, blank line, description; shown by megago help NAME

	// run executes the command with the arguments after its name. It must
	// call parseFlags first (see the package documentation) and return an
	// error rather than exit.
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands is the table of registered subcommands, filled by register from
// init functions and read-only afterwards.
var commands []command

// register adds c to the command table. It panics if c has no name or run
// function, or if a command of the same name is already registered.
func register(c command) {
	if c.name == "" || c.run == nil {
		panic(fmt.Sprintf("megago: register: command %q needs a name and a run function", c.name))
	}
	if _, ok := lookup(c.name); ok {
		panic(fmt.Sprintf("megago: register: command %q registered twice", c.name))
	}
	commands = append(commands, c)
	slices.SortFunc(commands, func(a, b command) int { return strings.Compare(a.name, b.name) })
}

// lookup returns the registered command called name.
func lookup(name string) (command, bool) {
	i := slices.IndexFunc(commands, func(c command) bool { return c.name == name })
	if i < 0 {
		return command{}, false
	}
	return commands[i], true
}

// dispatch runs the subcommand named by args[0] with the remaining
// arguments, as main does with os.Args[1:]. With no arguments it prints the
// command list to stderr and returns a *usageError. A command's error is
// returned prefixed with the command's name; a request for help (-h) that
// the command has answered is not an error.
func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printUsage(stderr)
		return &usageError{errors.New("no command given")}
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		name = "help"
	}
	c, ok := lookup(name)
	if !ok {
		return &usageError{fmt.Errorf("unknown command %q; run 'megago help' for the list", name)}
	}
	err := c.run(ctx, args[1:], stdout, stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return nil
	default:
		return fmt.Errorf("%s: %w", c.name, err)
	}
}

// A usageError reports a command line megago cannot parse. main exits with
// status 2 for it, as the flag package does.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// parseFlags parses args with fs, whose name must be a registered command.
// On -h or -help it prints that command's help and its flags to stdout and
// returns flag.ErrHelp, which dispatch treats as success. A flag fs does not
// define, or a malformed value, is returned as a *usageError.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	fs.SetOutput(io.Discard) // errors are returned and printed once, by main
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		printCommandHelp(stdout, fs)
		return flag.ErrHelp
	}
	if err != nil {
		return &usageError{err}
	}
	return nil
}

// noArgs returns a *usageError if fs was given positional arguments.
func noArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return &usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}

// printUsage writes megago's usage and the list of commands to w.
func printUsage(w io.Writer) {
	fmt.Fprint(w, "megago is the command-line tool of the megago library.\n\n")
	fmt.Fprint(w, "Usage:\n\n\tmegago <command> [arguments]\n\nThe commands are:\n\n")
	for _, c := range commands {
		fmt.Fprintf(w, "\t%-12s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nRun 'megago help <command>' for more about a command.\n")
}

// printCommandHelp writes the help of the command fs belongs to, followed by
// fs's flags if it has any, to w.
func printCommandHelp(w io.Writer, fs *flag.FlagSet) {
	c, _ := lookup(fs.Name())
	fmt.Fprintf(w, "usage: %s\n", strings.TrimRight(c.usage, "\n"))
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprint(w, "\nFlags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
}
