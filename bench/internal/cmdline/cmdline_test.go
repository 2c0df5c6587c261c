package cmdline_test

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/outlast-llm/outlast/bench/internal/cmdline"
)

// The command line quotes what a shell would split or lose, and nothing else.
func TestCommandLine(t *testing.T) {
	got := cmdline.CommandLine("load", []string{"--rate", "2000", "--note", "a b", ""})
	if want := `cd bench && go run ./load --rate 2000 --note "a b" ""`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// The password of a Redis URL stays out of the command line, in either
// form of the flag; the rest of the URL, and other URLs, stay as they are.
func TestCommandLineRedactsRedisPassword(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--redis", "redis://user:s3cret@host:6379/0"}, "--redis redis://user:xxxxx@host:6379/0"},
		{[]string{"--redis=redis://user:s3cret@host:6379/0"}, "--redis=redis://user:xxxxx@host:6379/0"},
		{[]string{"-redis", "rediss://:s3cret@host"}, "-redis rediss://:xxxxx@host"},
		{[]string{"-redis=REDISS://u:p:q@h/1?x=a@b"}, "-redis=REDISS://u:xxxxx@h/1?x=a@b"},
		{[]string{"--redis", "redis://u:p%40ss@h"}, "--redis redis://u:xxxxx@h"},
		{[]string{"--redis", "redis://user@host/0"}, "--redis redis://user@host/0"},
		{[]string{"--redis", "redis://host:6379/0"}, "--redis redis://host:6379/0"},
		{[]string{"--note", "http://u:p@h"}, "--note http://u:p@h"},
		{[]string{"--note=a=b"}, "--note=a=b"},
	} {
		got := cmdline.CommandLine("redisgate", c.args)
		if want := "cd bench && go run ./redisgate " + c.want; got != want {
			t.Errorf("%q: got %s, want %s", c.args, got, want)
		}
		if strings.Contains(got, "s3cret") {
			t.Errorf("%q: the password shows in %s", c.args, got)
		}
	}
}

// A buffer is not a terminal: progress lines stay off it.
func TestTerminal(t *testing.T) {
	if w := cmdline.Terminal(new(bytes.Buffer)); w != nil {
		t.Errorf("got %v, want nil for a buffer", w)
	}
}

func TestReport(t *testing.T) {
	rep := map[string]int{"n": 1}
	var md, js strings.Builder
	if err := cmdline.Report(&md, false, rep, func(w io.Writer) { io.WriteString(w, "| n |\n") }); err != nil || md.String() != "| n |\n" {
		t.Errorf("markdown: got %q, %v", md.String(), err)
	}
	if err := cmdline.Report(&js, true, rep, func(io.Writer) { t.Error("markdown written for JSON") }); err != nil || js.String() != "{\n  \"n\": 1\n}\n" {
		t.Errorf("JSON: got %q, %v", js.String(), err)
	}
}

type check struct {
	name string
	ok   bool
}

func (c check) OK() bool     { return c.ok }
func (c check) Line() string { return c.name }

func TestChecks(t *testing.T) {
	pass := []check{{"a", true}, {"b", true}}
	var w, stderr strings.Builder
	cmdline.WriteChecks(&w, pass)
	if want := "Checks, all 2 passed:\n\n- a\n- b\n"; w.String() != want {
		t.Errorf("all passed: got %q, want %q", w.String(), want)
	}
	if err := cmdline.CheckFailures(&stderr, "prog", pass); err != nil || stderr.Len() != 0 {
		t.Errorf("all passed: got %v and %q on stderr", err, stderr.String())
	}
	mixed := []check{{"a", true}, {"b", false}, {"c", false}}
	w.Reset()
	cmdline.WriteChecks(&w, mixed)
	if want := "Checks, 2 of 3 FAILED:\n\n- a\n- **FAILED** b\n- **FAILED** c\n"; w.String() != want {
		t.Errorf("mixed: got %q, want %q", w.String(), want)
	}
	if got := cmdline.Failed(mixed); len(got) != 2 || got[0].name != "b" || got[1].name != "c" {
		t.Errorf("Failed: got %v", got)
	}
	err := cmdline.CheckFailures(&stderr, "prog", mixed)
	if err == nil || err.Error() != "2 of 3 checks failed" || stderr.String() != "prog: b\nprog: c\n" {
		t.Errorf("mixed: got %v and %q on stderr", err, stderr.String())
	}
}
