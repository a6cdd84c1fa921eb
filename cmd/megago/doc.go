// Command megago is the command-line tool of the megago library.
//
// Usage:
//
//	megago <command> [arguments]
//
// The commands today are:
//
//	help      show help for megago or one of its commands
//	version   print megago's version, Go version and platform
//
// Planned commands (preprocess, launch, convert, bench, inspect) will be
// added one file each.
//
// # Adding a command
//
// A command is a [command] value registered from an init function in its own
// file, named after it (version.go registers "version"):
//
//	func init() {
//		register(command{
//			name:    "inspect",
//			summary: "print a checkpoint's tensors",
//			usage:   "megago inspect [-json] DIR\n\nInspect prints ...",
//			run:     runInspect,
//		})
//	}
//
// run parses its arguments with its own flag.NewFlagSet(name,
// flag.ContinueOnError) through [parseFlags], before doing anything else:
// "megago help NAME" calls run with the single argument -h and relies on
// parseFlags printing the command's help and returning [flag.ErrHelp].
// run writes only to the stdout and stderr it is given, honours ctx
// (cancelled on SIGINT or SIGTERM), and returns an error instead of exiting.
//
// # Exit status
//
// main is the only function that calls os.Exit. The status is 0 on success
// (including help requested with help or -h), 2 for a command line megago
// cannot parse (no command, an unknown command or flag, a wrong number of
// arguments), as the flag package does, and 1 for any other error. Errors are
// printed to standard error as "megago: COMMAND: message".
package main
