package cli_test

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/outlast-llm/outlast/cmd/outlast/cli"
)

// run runs the outlast command with args, as main does, and returns what
// it printed and its error.
func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = cli.Run(t.Context(), args, &out, &errOut)
	return out.String(), errOut.String(), err
}

// A name typed wrong is a usage error (exit 2) that names the one near
// it, whether a command or any subcommand's flag, and says where to look
// when none is near.
func TestUnknownName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		// A letter left out of a command.
		{"command", []string{"serv"}, `usage: unknown command "serv" (did you mean "serve"?)`},
		// help is a command too, though not in the list.
		{"help", []string{"hlep"}, `usage: unknown command "hlep" (did you mean "help"?)`},
		// An empty argument, as "outlast $CMD" with CMD set to "" gives.
		{"empty command", []string{""}, `usage: unknown command "" (try "outlast help")`},
		// Near no command: the way to the list.
		{"command near none", []string{"frobnicate"}, `usage: unknown command "frobnicate" (try "outlast help")`},
		// A flag before the command is one of the two that go there.
		{"flag before the command", []string{"--verison"}, "usage: unknown flag --verison (did you mean --version?)"},
		// A subcommand's flag before the subcommand: the way to the list.
		{"flag near neither", []string{"--listen", ":8700"}, `usage: unknown flag --listen (try "outlast help")`},
		// The case: --wait for --waits.
		{"serve flag", []string{"serve", "--wait", "5s"}, "usage: serve: unknown flag --wait (did you mean --waits?)"},
		// With its value after "=", and one dash: the suggestion still
		// has two, as the help writes flags.
		{"serve flag with =", []string{"serve", "-wiats=5s"}, "usage: serve: unknown flag --wiats (did you mean --waits?)"},
		// A flag's value that looks like a flag is the value, not the
		// unknown flag: the one after it is.
		{"after a value with a dash", []string{"serve", "--name", "-x", "--graec", "5s"}, "usage: serve: unknown flag --graec (did you mean --grace?)"},
		// A bool flag takes no value: the next argument is a flag.
		{"after a bool flag", []string{"mock", "--quiet", "--scrpt", "ok"}, "usage: mock: unknown flag --scrpt (did you mean --script?)"},
		{"requests flag", []string{"requests", "--jsn"}, "usage: requests: unknown flag --jsn (did you mean --json?)"},
		{"demo flag", []string{"demo", "--plian"}, "usage: demo: unknown flag --plian (did you mean --plain?)"},
		// Near no flag: the way to the list.
		{"flag near none", []string{"mock", "--colour", "red"}, "usage: mock: unknown flag --colour (see --help)"},
		// A flag part of several names (--first-byte-timeout,
		// --idle-timeout...) is near none of them.
		{"flag in several", []string{"serve", "--byte-timeout", "5s"}, "usage: serve: unknown flag --byte-timeout (see --help)"},
		// A known flag with a bad value keeps the flag package's message.
		{"bad value", []string{"mock", "--slots", "many"}, `usage: mock: invalid value "many" for flag -slots`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := run(t, tc.args...)
			switch {
			case err == nil:
				t.Fatalf("outlast %s: got no error, want %q", strings.Join(tc.args, " "), tc.want)
			case !strings.HasPrefix(err.Error(), tc.want):
				t.Errorf("outlast %s: got %q, want %q", strings.Join(tc.args, " "), err, tc.want)
			case !errors.Is(err, cli.ErrUsage):
				t.Errorf("outlast %s: got %v, want an error wrapping ErrUsage (exit 2)", strings.Join(tc.args, " "), err)
			}
		})
	}
}

// The usage goes to stdout when asked for, and exits 0; with no command,
// it goes to stderr with a usage error (exit 2), as a misspelled one does.
func TestUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		args    []string
		wantOut bool // the usage on stdout and a nil error, or on stderr and ErrUsage
	}{
		// Nothing asked for: bad usage, though the usage helps.
		{"no arguments", nil, false},
		// Asked for, in each of the usual ways.
		{"help", []string{"help"}, true},
		{"-h", []string{"-h"}, true},
		{"-help", []string{"-help"}, true},
		{"--help", []string{"--help"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, err := run(t, tc.args...)
			const usage = "Usage: outlast <command> [flags]"
			if tc.wantOut {
				if err != nil || !strings.Contains(stdout, usage) || stderr != "" {
					t.Errorf("got %v, stdout %q, stderr %q; want nil, the usage on stdout alone", err, stdout, stderr)
				}
				return
			}
			if !errors.Is(err, cli.ErrUsage) || !strings.Contains(stderr, usage) || stdout != "" {
				t.Errorf("got %v, stdout %q, stderr %q; want a usage error, the usage on stderr alone", err, stdout, stderr)
			}
		})
	}
}

// --version and the version command print one line on stdout: the
// binary's version line, ending with the Go version.
func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel()
			stdout, stderr, err := run(t, args...)
			if err != nil || stderr != "" {
				t.Fatalf("got %v, stderr %q; want nil, nothing on stderr", err, stderr)
			}
			if !strings.HasPrefix(stdout, "outlast ") || !strings.HasSuffix(stdout, " "+runtime.Version()+"\n") || strings.Count(stdout, "\n") != 1 {
				t.Errorf("got %q, want one line such as \"outlast (devel) %s\"", stdout, runtime.Version())
			}
		})
	}
}

// A flag given twice is refused: the flag package would keep the last
// value silently, and --upstream twice served the second alone.
func TestFlagGivenTwice(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"serve", "--upstream", "http://127.0.0.1:8701", "--upstream", "http://127.0.0.1:8702"},
		{"mock", "--script", "502x3", "--script", "ok"},
		{"requests", "--json", "--json"},
	} {
		var stdout, stderr strings.Builder
		err := cli.Run(t.Context(), args, &stdout, &stderr)
		if err == nil || !errors.Is(err, cli.ErrUsage) || !strings.Contains(err.Error(), "given twice") {
			t.Errorf("%q: got %v, want a usage error saying the flag is given twice", args, err)
		}
	}
}
