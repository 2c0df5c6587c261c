// Command outlast runs the outlast tools: the gateway (serve), the
// fault-injecting mock provider (mock), the journal's reader (requests)
// and a demo of an outage outlasted (demo). Run "outlast help" for the
// list.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/outlast-llm/outlast/cmd/outlast/cli"
	"github.com/outlast-llm/outlast/server"
)

func main() {
	server.RunJournalWriter()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal starts the stop; a second one has its default
	// effect, and ends the process at once, as an operator expects.
	context.AfterFunc(ctx, stop)
	err := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, cli.ErrUsage):
		fmt.Fprintln(os.Stderr, "outlast:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "outlast:", err)
		os.Exit(1)
	}
}
