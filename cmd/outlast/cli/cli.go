// Package cli holds the outlast command's subcommands, one file each, so
// that cmd/outlast/main.go only calls Run. It is not internal only so that
// the bench module can build the gateway as serve does (ServeConfig); its
// API is the command's, with no promise of stability.
package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
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
	"version":  {"print the version of outlast, of the commit it was built from and of Go", runVersion},
}

// Run runs the subcommand that args name. Asked for, the usage goes to
// stdout; without a command, it goes to stderr, before a usage error.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		// Not a request for help: a script that runs "outlast $CMD" with
		// CMD unset fails, as it would with CMD misspelled.
		usage(stderr)
		return fmt.Errorf("%w: no command given", ErrUsage)
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return nil
	case "-version", "--version":
		args = append([]string{"version"}, args[1:]...)
	}
	c, ok := commands[args[0]]
	if !ok {
		return unknownCommand(args[0])
	}
	return c.run(ctx, args[1:], stdout, stderr)
}

// unknownCommand is the usage error for a first argument that names no
// command: a flag is compared with the two that go first, --help and
// --version, and a word with the commands.
func unknownCommand(arg string) error {
	const try = ` (try "outlast help")`
	if name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "="); strings.HasPrefix(arg, "-") && name != "" {
		return unknownFlagError("", name, []string{"help", "version"}, try)
	}
	return fmt.Errorf("%w: unknown command %q%s", ErrUsage, arg, cmp.Or(didYouMean(arg, commandNames(), quoted), try))
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "outlast: retries that outlast an LLM provider's outage.")
	fmt.Fprintln(w, "\nUsage: outlast <command> [flags]\n\nCommands:")
	for _, n := range slices.Sorted(maps.Keys(commands)) {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun \"outlast <command> --help\" for a command's flags and their defaults.")
}

// commandNames returns the names a first argument may have: each
// command's, and help.
func commandNames() []string {
	return append(slices.Sorted(maps.Keys(commands)), "help")
}

// parseCommand parses args as the flags of the command name, which
// define defines on its flag set, and returns what define returned. Its
// --help writes usage, then the flags with printFlags, to stderr. done and
// err are as parseFlags returns them.
func parseCommand[F any](name, usage string, define func(*flag.FlagSet) F, args []string, stderr io.Writer) (f F, done bool, err error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	f = define(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, usage)
		printFlags(stderr, fs)
	}
	done, err = parseFlags(fs, args, stderr)
	return f, done, err
}

// onceValue is a flag's value that may be set once.
type onceValue struct {
	flag.Value
	set bool
}

func (v *onceValue) Set(s string) error {
	if v.set {
		return errors.New("it is given twice, and a flag takes one value")
	}
	v.set = true
	return v.Value.Set(s)
}

// IsBoolFlag tells the flag package what the value it wraps does.
func (v *onceValue) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// parseFlags parses args with fs. A flag error becomes a one-line usage
// error, without the flag package's own message and help; --help prints
// the help to stderr and sets done with a nil error.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) (done bool, err error) {
	usage := fs.Usage
	fs.Usage = func() {} // the flag package calls it on every error
	fs.SetOutput(io.Discard)
	// A flag given twice would keep its last value silently: refuse it.
	// (Wrapped for the parse only: the help names a flag's type by its
	// value's.)
	fs.VisitAll(func(fl *flag.Flag) { fl.Value = &onceValue{Value: fl.Value} })
	err = fs.Parse(args)
	fs.VisitAll(func(fl *flag.Flag) { fl.Value = fl.Value.(*onceValue).Value })
	fs.SetOutput(stderr)
	fs.Usage = usage
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			if usage == nil {
				printFlags(stderr, fs)
			} else {
				usage()
			}
			return true, nil
		}
		if name, ok := unknownFlag(fs, args); ok {
			return true, unknownFlagError(fs.Name()+": ", name, flagNames(fs), " (see --help)")
		}
		return true, fmt.Errorf("%w: %s: %v (see --help)", ErrUsage, fs.Name(), err)
	}
	if fs.NArg() > 0 {
		return true, fmt.Errorf("%w: %s: unexpected argument %q", ErrUsage, fs.Name(), fs.Arg(0))
	}
	return false, nil
}

// unknownFlag returns the name of the first flag in args that fs does not
// define, reading args as fs.Parse does: up to "--" or the first argument
// that is not a flag, a flag without "=" taking the next argument as its
// value unless it is a bool. The flag package says which flag it did not
// know only in its message, which is no API to parse.
func unknownFlag(fs *flag.FlagSet, args []string) (name string, ok bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(a) < 2 || a[0] != '-' || a == "--" {
			return "", false
		}
		name, _, hasValue := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		f := fs.Lookup(name)
		switch {
		case name == "" || name[0] == '-':
			return "", false // "---x" or "-=x", which the flag package words better
		case f == nil && name != "help" && name != "h":
			return name, true
		case f == nil:
			return "", false // --help, which is no error
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !hasValue && !(ok && b.IsBoolFlag()) {
			i++ // the flag's value
		}
	}
	return "", false
}

// unknownFlagError is the usage error for --name, which is none of the
// flags known, after prefix: it names the closest, or else adds look.
func unknownFlagError(prefix, name string, known []string, look string) error {
	return fmt.Errorf("%w: %sunknown flag --%s%s", ErrUsage, prefix, name, cmp.Or(didYouMean(name, known, dashes), look))
}

// flagNames returns the names of fs's flags.
func flagNames(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

// dashes writes a flag's name as the help does: "--waits".
func dashes(name string) string { return "--" + name }

// quoted writes a name as Go quotes it: "serve".
func quoted(name string) string { return strconv.Quote(name) }
