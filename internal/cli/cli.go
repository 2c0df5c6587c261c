// Package cli holds the outlast command's subcommands, one file each, so
// that cmd/outlast/main.go only calls Run.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
)

// ErrUsage is wrapped by errors about how the command was called; main
// exits 2 for them.
var ErrUsage = errors.New("usage")

// ErrFailed is returned by a subcommand that ran and has already said
// what went wrong; main exits 1 for it without more to print.
var ErrFailed = errors.New("failed")

type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"demo":     {"show a run outlasting a provider outage, in one process", runDemo},
	"requests": {"print the record: each request with its attempts and waits", runRequests},
	"mock":     {"serve a fault-injecting LLM provider (OpenAI, Anthropic, llama.cpp)", runMock},
	"serve":    {"run the gateway: retries, slot gate and record in front of an LLM API", runServe},
}

// Run runs the subcommand that args name.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		return nil
	}
	c, ok := commands[args[0]]
	if !ok {
		return fmt.Errorf("%w: unknown command %q (try \"outlast help\")", ErrUsage, args[0])
	}
	return c.run(ctx, args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "outlast: retries that outlast an LLM provider's outage.")
	fmt.Fprintln(w, "\nUsage: outlast <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun \"outlast <command> --help\" for a command's flags and their defaults.")
}

// parseFlags parses args with fs. A flag error becomes a one-line usage
// error, without the flag package's own message and help; --help prints
// the help to stderr and sets done with a nil error.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) (done bool, err error) {
	usage := fs.Usage
	fs.Usage = func() {} // the flag package calls it on every error
	fs.SetOutput(io.Discard)
	err = fs.Parse(args)
	fs.SetOutput(stderr)
	fs.Usage = usage
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			if usage == nil {
				fs.PrintDefaults()
			} else {
				usage()
			}
			return true, nil
		}
		return true, fmt.Errorf("%w: %s: %v (see --help)", ErrUsage, fs.Name(), err)
	}
	if fs.NArg() > 0 {
		return true, fmt.Errorf("%w: %s: unexpected argument %q", ErrUsage, fs.Name(), fs.Arg(0))
	}
	return false, nil
}
