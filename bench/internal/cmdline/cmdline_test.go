package cmdline_test

import (
	"bytes"
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
