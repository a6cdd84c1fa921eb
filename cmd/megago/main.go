package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "megago: %v\n", err)
	}
	os.Exit(exitCode(err))
}

// exitCode maps dispatch's result to the process exit status: 0 for nil, 2
// for a *usageError and 1 for any other error.
func exitCode(err error) int {
	var uerr *usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &uerr):
		return 2
	default:
		return 1
	}
}
