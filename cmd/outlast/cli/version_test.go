package cli

import (
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/outlast-llm/outlast"
)

// The version line says what the build recorded, and no more.
func TestVersionLine(t *testing.T) {
	t.Parallel()
	const rev = "a53273ca433feaf68169a28e65d5c0bb195b3933"
	build := func(version string, settings ...debug.BuildSetting) *debug.BuildInfo {
		return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/outlast-llm/outlast", Version: version}, Settings: settings}
	}
	for _, tc := range []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		// Built from a checkout with changes.
		{"dirty checkout", build("(devel)", debug.BuildSetting{Key: "vcs.revision", Value: rev}, debug.BuildSetting{Key: "vcs.modified", Value: "true"}), "outlast 0.2.0-dev a53273c+dirty go1.26.8"},
		// A clean checkout has no mark.
		{"clean checkout", build("(devel)", debug.BuildSetting{Key: "vcs.revision", Value: rev}, debug.BuildSetting{Key: "vcs.modified", Value: "false"}), "outlast 0.2.0-dev a53273c go1.26.8"},
		// Built with -buildvcs=false, or outside git: no revision, and
		// no "+dirty" without one to mark.
		{"no revision", build("(devel)", debug.BuildSetting{Key: "vcs.modified", Value: "true"}), "outlast 0.2.0-dev go1.26.8"},
		// go install …@v0.2.0 records the tag and no revision: the
		// version is the source's, which the tag names.
		{"released", build("v0.2.0"), "outlast 0.2.0-dev go1.26.8"},
		// go install …@main records a pseudo-version and no revision:
		// the commit is the one it names.
		{"pseudo-version", build("v0.1.1-0.20261203134308-a53273ca433f"), "outlast 0.2.0-dev a53273c go1.26.8"},
		{"first pseudo-version", build("v0.0.0-20261203134308-a53273ca433f+dirty"), "outlast 0.2.0-dev a53273c go1.26.8"},
		// A revision shorter than 7 digits is shown whole.
		{"short revision", build("(devel)", debug.BuildSetting{Key: "vcs.revision", Value: "a53"}), "outlast 0.2.0-dev a53 go1.26.8"},
		// Built without module support: nothing but Go's version.
		{"no build info", nil, "outlast 0.2.0-dev " + runtime.Version()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := versionLine("0.2.0-dev", tc.info); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// outlast --version says the version that the health endpoint and the
// page say: outlast.Version.
func TestVersionIsOutlastVersion(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	if err := Run(t.Context(), []string{"--version"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if want := "outlast " + outlast.Version + " "; !strings.HasPrefix(out.String(), want) {
		t.Errorf("got %q, want it to begin %q", out.String(), want)
	}
}
