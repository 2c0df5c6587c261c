package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/outlast-llm/outlast/mockllm"
)

// TestMain lets the test binary run the example itself, as its own
// process, so that what it writes to stderr can be seen.
func TestMain(m *testing.M) {
	if os.Getenv("OUTLAST_EXAMPLE_CHILD") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The README's example rides out an outage, three failures of two kinds
// before the answer, and writes nothing to stderr on the way: the library
// logs only when given a Logger.
func TestExampleSilentThroughOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 1 s and 2 s between attempts, as the example's policy says")
	}
	mock := mockllm.NewServer("503,529,ok")
	defer mock.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "OUTLAST_EXAMPLE_CHILD=1", "OPENAI_BASE_URL="+mock.URL+"/v1", "OPENAI_API_KEY=sk-test")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the example failed: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "200 OK {") {
		t.Errorf("stdout: got %q, want the answer, 200 OK", stdout.String())
	}
	if stderr.Len() > 0 {
		t.Errorf("the example wrote to stderr:\n%s", stderr.String())
	}
	if got := mock.Stats().Total; got != 3 {
		t.Errorf("the mock saw %d requests, want 3", got)
	}
}
