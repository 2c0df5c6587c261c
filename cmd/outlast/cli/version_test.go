package cli

import (
	"runtime"
	"runtime/debug"
	"testing"
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
		// Built from a checkout with changes: the example.
		{"dirty checkout", build("(devel)", debug.BuildSetting{Key: "vcs.revision", Value: rev}, debug.BuildSetting{Key: "vcs.modified", Value: "true"}), "outlast (devel) a53273c+dirty go1.26.8"},
		// A clean checkout has no mark.
		{"clean checkout", build("(devel)", debug.BuildSetting{Key: "vcs.revision", Value: rev}, debug.BuildSetting{Key: "vcs.modified", Value: "false"}), "outlast (devel) a53273c go1.26.8"},
		// Built with -buildvcs=false, or outside git: no revision, and
		// no "+dirty" without one to mark.
		{"no revision", build("(devel)", debug.BuildSetting{Key: "vcs.modified", Value: "true"}), "outlast (devel) go1.26.8"},
		// go install …@v1.2.0 records the version and no revision.
		{"released", build("v1.2.0"), "outlast v1.2.0 go1.26.8"},
		// Built in a clone past its last tag, the pseudo-version holds
		// the revision and the mark: they are not said twice.
		{"pseudo-version", build("v0.0.0-20261203134308-a53273ca433f+dirty", debug.BuildSetting{Key: "vcs.revision", Value: rev}, debug.BuildSetting{Key: "vcs.modified", Value: "true"}), "outlast v0.0.0-20261203134308-a53273ca433f+dirty go1.26.8"},
		// Built at a tag, the version does not say the commit.
		{"tagged clone", build("v1.2.0", debug.BuildSetting{Key: "vcs.revision", Value: rev}), "outlast v1.2.0 a53273c go1.26.8"},
		// A version left empty reads as a checkout's.
		{"empty version", build(""), "outlast (devel) go1.26.8"},
		// A revision shorter than 7 digits is shown whole.
		{"short revision", build("(devel)", debug.BuildSetting{Key: "vcs.revision", Value: "a53"}), "outlast (devel) a53 go1.26.8"},
		// Built without module support: nothing but Go's version.
		{"no build info", nil, "outlast (unknown) " + runtime.Version()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := versionLine(tc.info); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
