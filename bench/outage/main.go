// Outage measures whether retries outlast a provider's outage: it runs a
// fake provider through an outage in virtual time (testing/synctest), loads
// it with requests from many client processes, and compares outlast with
// the libraries users would pick instead, each running its own code, and
// with the physical limit. It prints a markdown table (or JSON) and writes
// an SVG chart of attempts per second.
//
// Usage:
//
//	cd bench && go run ./outage [flags]
//
// Run it with --help for the flags and their defaults; docs/outage.md has
// the results and what they mean.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.As(err, new(usageError)):
		fmt.Fprintln(os.Stderr, "outage:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "outage:", err)
		os.Exit(1)
	}
}
