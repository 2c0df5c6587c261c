package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/outlast-llm/outlast/server"
)

// TestMain lets the test binary be the child writer, as the load program
// is for --journal-child, and the deployed upstream and proxy.
func TestMain(m *testing.M) {
	server.RunJournalWriter()
	runChild()
	os.Exit(m.Run())
}

// TestSmokeJournalInline runs the program at a tiny scale with the journal
// written in-process, and checks that every request succeeded. (TestSmoke
// runs the default, a child writer.)
func TestSmokeJournalInline(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	args := append(append([]string(nil), tiny...), "--journal-child=false", "--gate-slots", "0", "--max-rates", "")
	if err := run(t.Context(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v; stderr: %s", err, stderr.String())
	}
	var rep report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("decoding the report: %v", err)
	}
	for _, row := range rep.Latency {
		for _, ts := range row.Targets {
			if ts.Errors != 0 || ts.N == 0 {
				t.Errorf("%s %s %s: got %d requests, %d errors (first: %q); want some, and no errors",
					row.Phase, row.Metric, ts.Name, ts.N, ts.Errors, ts.FirstError)
			}
		}
	}
}

// TestSmokeDeployed runs the program at a tiny scale with every target in
// a process of its own, outlast serve built from this module, and checks
// that every request succeeded and the CPU time is every process's.
func TestSmokeDeployed(t *testing.T) {
	if testing.Short() {
		t.Skip("builds outlast")
	}
	t.Parallel()
	var stdout, stderr bytes.Buffer
	args := append(append([]string(nil), tiny...), "--deployed", "--gate-slots", "0", "--max-rates", "")
	if err := run(t.Context(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v; stderr: %s", err, stderr.String())
	}
	var rep report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("decoding the report: %v", err)
	}
	if want := "direct,proxy,gateway,gateway+journal"; strings.Join(rep.Targets, ",") != want || !rep.Deployed {
		t.Fatalf("targets %v, deployed %v; want %s, true", rep.Targets, rep.Deployed, want)
	}
	var cpu float64
	for _, row := range rep.Latency {
		for _, ts := range row.Targets {
			if ts.Errors != 0 || ts.N == 0 {
				t.Errorf("%s %s %s: got %d requests, %d errors (first: %q); want some, and no errors",
					row.Phase, row.Metric, ts.Name, ts.N, ts.Errors, ts.FirstError)
			}
			if ts.CPU != nil {
				cpu += *ts.CPU
			}
		}
	}
	// This process alone spends far less than the 10 ms tick /proc counts
	// in over a run this small: the total is the children's too.
	if runtime.GOOS == "linux" && cpu <= 0 {
		t.Errorf("no CPU time counted over the run; want the children's")
	}
}

// TestTreeCPU checks that a process's CPU time counts its children's: a
// child that spins for a while is seen through its parent. CPU time
// comes with no event to wait for: it is read every 10 ms.
func TestTreeCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	t.Parallel()
	cmd := exec.Command("sh", "-c", "sh -c 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; sleep 30' & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	giveUp := time.After(time.Minute)
	for {
		got, ok := treeCPU(cmd.Process.Pid)
		if !ok {
			t.Fatalf("treeCPU(%d): not ok", cmd.Process.Pid)
		}
		if got >= 50*time.Millisecond {
			return // the grandchild's loop, seen through the shell that waits for it
		}
		select {
		case <-giveUp:
			t.Fatal("the child's CPU time did not reach 50 ms in a minute")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestDeployedOwnFiles checks that each deployed child runs from a file of
// its own, neither this program's nor another child's: processes of one
// file share the pages of its code, which would warm a target's code with
// the load generator's and the upstream's requests.
func TestDeployedOwnFiles(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	t.Parallel()
	d := &deployed{dir: t.TempDir()}
	defer func() {
		if err := d.close(); err != nil {
			t.Error(err)
		}
	}()
	up, err := d.child(t.Context(), "upstream")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.child(t.Context(), "proxy", "--upstream", up.String()); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{self: "this program"}
	for i, c := range d.children {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", c.PID()))
		if err != nil {
			t.Fatal(err)
		}
		if other, ok := seen[exe]; ok {
			t.Errorf("child %d runs %s, as %s does; want a file of its own", i, exe, other)
		}
		seen[exe] = fmt.Sprintf("child %d", i)
	}
}
