package journalproc

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestLowerPriority checks that the writer's every thread runs at nice
// 19 under SCHED_IDLE (policy 5), so that the gateway's threads take the
// CPU from it as soon as they wake.
func TestLowerPriority(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childPriority+"=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 2 {
		t.Fatalf("the child printed %q; want a line for each of its threads", out)
	}
	for _, l := range lines {
		if l != "nice 19 policy 5" {
			t.Errorf("a thread is at %q; want nice 19 policy 5 (SCHED_IDLE)", l)
		}
	}
}
