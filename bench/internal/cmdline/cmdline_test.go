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
