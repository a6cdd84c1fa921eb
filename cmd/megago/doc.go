// Command megago is the command-line tool of the megago library.
//
// Usage:
//
//	megago <command> [arguments]
//
// The commands are listed by "megago help"; among them:
//
//	preprocess  turn JSON lines into Megatron .bin/.idx datasets
//	convert     reshard a checkpoint; import or export Hugging Face and Megatron-LM models
//	inspect     print an indexed dataset's header, statistics and samples
//	launch      start N local ranks with torchrun's environment
//	serve       serve a trained GPT over HTTP (Megatron's /api, OpenAI's API, a web page)
//	tune        search an example's hyperparameters, with early stopping (package tune)
//	version     print megago's version, Go version and platform
//
// Each command lives in its own file (preprocess.go, inspect.go, ...).
//
// # Adding a command
//
// A command is a [command] value registered from an init function in its own
// file, named after it (version.go registers "version"):
//
//	func init() {
//		register(command{
//			name:    "convert",
//			summary: "convert a checkpoint",
//			usage:   "megago convert [flags] SRC DST\n\nConvert ...",
//			run:     runConvert,
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
