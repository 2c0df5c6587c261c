package cli

import (
	"bytes"
	"flag"
	"io"
	"regexp"
	"strings"
	"testing"
)

// Every subcommand's --help writes each of its flags in one style,
// serve's: "--name ARG", then its help with its default. None is in the
// flag package's style, "-name", which the other subcommands printed.
func TestHelpFlagStyle(t *testing.T) {
	t.Parallel()
	// Each command's flags, defined as the command defines them. A new
	// command fails the test until it is added here.
	define := map[string]func(fs *flag.FlagSet){
		"serve":    func(fs *flag.FlagSet) { newServeFlags(fs) },
		"mock":     func(fs *flag.FlagSet) { newMockFlags(fs) },
		"requests": func(fs *flag.FlagSet) { newRequestsFlags(fs) },
		"demo":     func(fs *flag.FlagSet) { newDemoFlags(fs) },
		"version":  func(*flag.FlagSet) {},
	}
	oneDash := regexp.MustCompile(`(?m)^\s*-[^-\s].*$`)
	for name := range commands {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if define[name] == nil {
				t.Fatalf("no flags for command %s: add them to this test", name)
			}
			var stderr bytes.Buffer
			if err := Run(t.Context(), []string{name, "--help"}, io.Discard, &stderr); err != nil {
				t.Fatalf("got %v, want nil", err)
			}
			help := stderr.String()
			if line := oneDash.FindString(help); line != "" {
				t.Errorf("got line %q, want no flag written with one dash", line)
			}
			fs := flag.NewFlagSet(name, flag.ContinueOnError)
			define[name](fs)
			n := 0
			fs.VisitAll(func(f *flag.Flag) {
				n++
				entry := regexp.MustCompile(`(?m)^  --` + regexp.QuoteMeta(f.Name) + `( \S+)?\n {8}.*\(default .+\)$`)
				if !entry.MatchString(help) {
					t.Errorf("got help without --%s, what it takes, its help and its default:\n%s", f.Name, help)
				}
			})
			if got := strings.Count(help, "\n  --"); got != n {
				t.Errorf("got %d flags in the help, want %d, one for each:\n%s", got, n, help)
			}
		})
	}
}
