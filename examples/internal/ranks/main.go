package ranks

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Main is an example program's main: it runs run with a context that Ctrl-C (or
// SIGTERM, which megago launch forwards) cancels — run then stops every rank after the
// current iteration; a second Ctrl-C kills the program — and exits 1 after printing
// "name: error", or 130 when run reports that it was interrupted. -help (flag.ErrHelp)
// exits 0.
func Main(name string, run func(ctx context.Context) (interrupted bool, err error)) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }()
	interrupted, err := run(ctx)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	case interrupted:
		os.Exit(130)
	}
}
