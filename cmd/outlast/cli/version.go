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

	"github.com/outlast-llm/outlast"
)

const versionUsage = `Usage: outlast version

Prints outlast's version on one line, for a bug report: the version, as
/outlast/health and the timeline page say it too; the commit it was built
from, with "+dirty" if it had uncommitted changes, when the build
recorded one; and the Go version. "outlast --version" does the same.`

// runVersion prints the version line of the running binary.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	noFlags := func(*flag.FlagSet) struct{} { return struct{}{} }
	if _, done, err := parseCommand("version", versionUsage, noFlags, args, stderr); done {
		return err
	}
	info, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(outlast.Version, info))
	return nil
}

// versionLine is "outlast VERSION [REVISION[+dirty]] GO", such as
// "outlast 0.2.0-dev a53273c+dirty go1.26.10": version is outlast.Version,
// the one version the health endpoint and the page say too, and info
// (nil for a binary built without module support) gives the rest. The
// revision is go build's (-buildvcs, in a clone), cut to 7 digits as git
// shows it; or, installed at a pseudo-version such as
// v0.0.0-20261203134308-4692b06088ab, the commit that names.
func versionLine(version string, info *debug.BuildInfo) string {
	parts := []string{"outlast", version}
	if info == nil {
		return strings.Join(append(parts, runtime.Version()), " ")
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "+dirty"
		}
	}
	if rev == "" {
		rev = pseudoRevision(info.Main.Version)
	}
	if rev != "" {
		parts = append(parts, rev[:min(7, len(rev))]+dirty)
	}
	return strings.Join(append(parts, cmp.Or(info.GoVersion, runtime.Version())), " ")
}

// pseudoRevision returns the commit a pseudo-version names, as
// v0.0.0-20261203134308-4692b06088ab does, or "" for any other version.
func pseudoRevision(v string) string {
	v, _, _ = strings.Cut(v, "+")
	i := strings.LastIndexByte(v, '-')
	if i < 0 || len(v)-i-1 != 12 || i < 15 {
		return ""
	}
	if stamp := v[i-14 : i]; strings.Trim(stamp, "0123456789") != "" || v[i-15] != '.' && v[i-15] != '-' {
		return ""
	}
	if strings.Trim(v[i+1:], "0123456789abcdef") != "" {
		return ""
	}
	return v[i+1:]
}
