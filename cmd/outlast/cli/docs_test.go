package cli

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

const gatewayDoc = "../../../docs/gateway.md"

// The settings markers in docs/gateway.md: the table between them is made
// from the settings table, as --help is.
const (
	settingsBegin = "<!-- settings: made by `go test ./cmd/outlast/cli -run TestGatewayDocSettings -update` -->\n"
	settingsEnd   = "<!-- end of settings -->\n"
)

// settingsMarkdown is docs/gateway.md's table of settings: every row of
// the settings table, in --help's order, with its flag, its key, its
// default and its help.
func settingsMarkdown() string {
	var b strings.Builder
	b.WriteString("| flag | key in the file | default | what it does |\n| --- | --- | --- | --- |\n")
	for _, s := range settings {
		flag := "`--" + s.flag
		if !s.bool {
			flag += " " + s.arg
		}
		flag += "`"
		help := strings.ReplaceAll(s.help, "|", `\|`)
		fmt.Fprintf(&b, "| %s | `%s`%s | %s | %s |\n", flag, s.key, s.scope.where(), "`"+s.shownDefault()+"`", help)
	}
	return b.String()
}

// docs/gateway.md lists every setting as --help does, from the same
// table, so the reference cannot drift from the binary.
func TestGatewayDocSettings(t *testing.T) {
	doc, err := os.ReadFile(gatewayDoc)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := strings.Cut(string(doc), settingsBegin)
	_, after, closed := strings.Cut(rest, settingsEnd)
	if !ok || !closed {
		t.Fatalf("%s has no settings markers %q … %q", gatewayDoc, settingsBegin, settingsEnd)
	}
	want := before + settingsBegin + settingsMarkdown() + settingsEnd + after
	if *update {
		if err := os.WriteFile(gatewayDoc, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if string(doc) != want {
		t.Errorf("%s's settings table differs from the settings table; run go test ./cmd/outlast/cli -run TestGatewayDocSettings -update", gatewayDoc)
	}
}

// The README's library example is examples/library, which the
// build compiles: a user who copies it gets a program that builds.
func TestREADMELibraryExample(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("../../../examples/library/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+string(example)+"```\n") {
		t.Errorf("README.md has no go block that is examples/library/main.go")
	}
}
