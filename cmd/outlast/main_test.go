package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// asMain, set in the environment, makes the test binary run main with
// its arguments, so that a test sees the exit code main gives.
const asMain = "OUTLAST_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMain) == "1" {
		main()
		os.Exit(0) // as the runtime does when main returns
	}
	os.Exit(m.Run())
}

// outlast runs main in a process of its own with args and returns its
// exit code and what it printed.
func outlast(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], args...)
	cmd.Env = append(os.Environ(), asMain+"=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if exit, ok := errors.AsType[*exec.ExitError](err); ok {
		return exit.ExitCode(), out.String(), errOut.String()
	} else if err != nil {
		t.Fatalf("outlast %s: %v", strings.Join(args, " "), err)
	}
	return 0, out.String(), errOut.String()
}

// main exits 0 for what was asked and done, 2 for bad usage, each with
// its output on the stream a script expects.
func TestExitCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string // in stdout; stdout is empty if ""
		wantStderr string // in stderr; stderr is empty if ""
	}{
		// Asked for, the usage is output, not an error.
		{"help", []string{"help"}, 0, "Usage: outlast <command>", ""},
		{"--help", []string{"--help"}, 0, "Usage: outlast <command>", ""},
		// No command is bad usage: the usage helps, on stderr, and the
		// last line says what is wrong.
		{"no arguments", nil, 2, "", "Usage: outlast <command>"},
		{"no arguments, the reason", nil, 2, "", "\noutlast: usage: no command given\n"},
		// The version is output, on one line.
		{"--version", []string{"--version"}, 0, "outlast ", ""},
		{"version", []string{"version"}, 0, "outlast ", ""},
		// A misspelled command is bad usage too.
		{"unknown command", []string{"serv"}, 2, "", `outlast: usage: unknown command "serv" (did you mean "serve"?)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := outlast(t, tc.args...)
			if code != tc.wantCode {
				t.Errorf("exit code: got %d, want %d", code, tc.wantCode)
			}
			checkOutput(t, "stdout", stdout, tc.wantStdout)
			checkOutput(t, "stderr", stderr, tc.wantStderr)
		})
	}
}

// checkOutput checks that got contains want, or is empty if want is.
func checkOutput(t *testing.T, name, got, want string) {
	t.Helper()
	switch {
	case want == "" && got != "":
		t.Errorf("%s: got %q, want nothing", name, got)
	case !strings.Contains(got, want):
		t.Errorf("%s: got %q, want it to contain %q", name, got, want)
	}
}
