package cli

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

const versionUsage = `Usage: outlast version

Prints outlast's version on one line, for a bug report: the module's
version ("(devel)" or a pseudo-version when built from a checkout), the
commit it was built from with "+dirty" if it had uncommitted changes, when
the build recorded them, and the Go version. "outlast --version" does the
same.`

// runVersion prints the version line of the running binary.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	noFlags := func(*flag.FlagSet) struct{} { return struct{}{} }
	if _, done, err := parseCommand("version", versionUsage, noFlags, args, stderr); done {
		return err
	}
	info, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(info))
	return nil
}

// versionLine is "outlast VERSION [REVISION[+dirty]] GO", such as
// "outlast (devel) a53273c+dirty go1.26.8", from info: nil for a binary
// built without module support. The revision is there only if go build
// recorded it (-buildvcs, in a clone), cut to 7 digits as git shows it,
// and only if the version does not hold it already: built in a clone
// past its last tag, the version is a pseudo-version such as
// v0.0.0-20261203134308-4692b06088ab+dirty, which says it all.
func versionLine(info *debug.BuildInfo) string {
	if info == nil {
		return "outlast (unknown) " + runtime.Version()
	}
	version := cmp.Or(info.Main.Version, "(devel)")
	parts := []string{"outlast", version}
	var rev, dirty string
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "+dirty"
		}
	}
	if rev != "" && !strings.Contains(version, rev[:min(12, len(rev))]) {
		parts = append(parts, rev[:min(7, len(rev))]+dirty)
	}
	parts = append(parts, cmp.Or(info.GoVersion, runtime.Version()))
	return strings.Join(parts, " ")
}
