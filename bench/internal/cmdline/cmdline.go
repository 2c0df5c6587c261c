// Package cmdline holds what the bench programs (load, outage) share as
// commands: their main, the command line that reproduces a run, and
// whether progress may go to a terminal.
package cmdline

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

// Main runs run with the process's arguments until SIGINT or SIGTERM,
// prints its error as one line prefixed with name, and exits 0, 1, or 2
// for a UsageError, an error in how the program was called.
func Main(name string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.As(err, new(UsageError)):
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// UsageError is a bad command line: Main exits 2 for it.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// CommandLine returns the shell command that reproduces a run of the
// program in bench/prog with args, quoting the arguments that need it.
func CommandLine(prog string, args []string) string {
	var b strings.Builder
	b.WriteString("cd bench && go run ./" + prog)
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'") {
			a = strconv.Quote(a)
		}
		b.WriteString(" " + a)
	}
	return b.String()
}

// Terminal returns w if it is a terminal, for progress lines, else nil.
func Terminal(w io.Writer) io.Writer {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	return w
}

// Report writes rep to w: indented JSON if asJSON, else what markdown
// writes.
func Report(w io.Writer, asJSON bool, rep any, markdown func(io.Writer)) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	markdown(w)
	return nil
}
