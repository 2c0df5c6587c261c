// Package cmdline holds what the bench programs (load, outage, soak,
// redisgate, realtime, failover) share as commands: their main, the
// command line that reproduces a run, whether progress may go to a
// terminal, the report as JSON or markdown, the list of a run's checks,
// and the section of a markdown file that a run rewrites.
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
// program in bench/prog with args, quoting the arguments that need it. The
// password of a redis:// or rediss:// URL, as an argument or as the value
// of a -flag=URL argument, reads as redacted.
func CommandLine(prog string, args []string) string {
	var b strings.Builder
	b.WriteString("cd bench && go run ./" + prog)
	for _, a := range args {
		a = redactArg(a)
		if a == "" || strings.ContainsAny(a, " \t\"'") {
			a = strconv.Quote(a)
		}
		b.WriteString(" " + a)
	}
	return b.String()
}

// redacted stands for a password that CommandLine leaves out.
const redacted = "xxxxx"

// redactArg returns a with the password of its Redis URL replaced by
// redacted, where a is such a URL or a flag set to one (-flag=URL).
func redactArg(a string) string {
	if strings.HasPrefix(a, "-") {
		if name, value, ok := strings.Cut(a, "="); ok {
			return name + "=" + redactURL(value)
		}
		return a
	}
	return redactURL(a)
}

// redactURL returns u with the password of its userinfo replaced by
// redacted if u is a redis:// or rediss:// URL with one, else u. The rest
// of u is kept byte for byte.
func redactURL(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok || !strings.EqualFold(scheme, "redis") && !strings.EqualFold(scheme, "rediss") {
		return u
	}
	authority := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return u
	}
	user, _, ok := strings.Cut(authority[:at], ":")
	if !ok {
		return u
	}
	return scheme + "://" + user + ":" + redacted + rest[at:]
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

// A Check is one thing a run must hold: whether it did, and the line that
// says what it is and how it went.
type Check interface {
	OK() bool
	Line() string
}

// Failed returns the checks that failed.
func Failed[C Check](checks []C) []C {
	var out []C
	for _, c := range checks {
		if !c.OK() {
			out = append(out, c)
		}
	}
	return out
}

// WriteChecks writes checks as a markdown list under "Checks, all N
// passed:" or "Checks, F of N FAILED:", each failed one marked.
func WriteChecks[C Check](w io.Writer, checks []C) {
	if failed := len(Failed(checks)); failed == 0 {
		fmt.Fprintf(w, "Checks, all %d passed:\n\n", len(checks))
	} else {
		fmt.Fprintf(w, "Checks, %d of %d FAILED:\n\n", failed, len(checks))
	}
	for _, c := range checks {
		mark := ""
		if !c.OK() {
			mark = "**FAILED** "
		}
		fmt.Fprintf(w, "- %s%s\n", mark, c.Line())
	}
}

// CheckFailures writes each failed check's line to stderr, after prog and
// a colon, and returns an error that counts them, or nil if none failed.
func CheckFailures[C Check](stderr io.Writer, prog string, checks []C) error {
	failed := Failed(checks)
	for _, c := range failed {
		fmt.Fprintln(stderr, prog+": "+c.Line())
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d checks failed", len(failed), len(checks))
	}
	return nil
}
