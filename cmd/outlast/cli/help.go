package cli

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"strings"
)

// printFlags writes fs's flags, by name, each with printFlag.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) { printFlag(w, f) })
}

// printFlag writes f with writeFlag: what it takes, a back-quoted word in
// its usage or else a word for its type, and its default, "none" for an
// empty one.
func printFlag(w io.Writer, f *flag.Flag) {
	arg, help := flag.UnquoteUsage(f)
	switch arg {
	case "int", "uint":
		arg = "N"
	case "float":
		arg = "NUMBER"
	}
	writeFlag(w, f.Name, strings.ToUpper(arg), help, cmp.Or(f.DefValue, "none"))
}

// writeFlag writes one flag for --help, in the style every subcommand's
// help shares, with two dashes as the errors name flags (the flag package
// takes one or two alike), what it takes unless it is a bool, and its
// default, which a note may follow after a semicolon:
//
//	--listen ADDRESS
//	      the host:port to serve on (default 127.0.0.1:8700; in the file: listen)
func writeFlag(w io.Writer, name, arg, help, def string) {
	if arg != "" {
		arg = " " + arg
	}
	fmt.Fprintf(w, "  --%s%s\n        %s (default %s)\n", name, arg, help, def)
}
