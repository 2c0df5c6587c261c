package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/outlast-llm/outlast/bench/internal/cmdline"
)

// TestMain lets the test binary be the program's children, as the program
// is for its contended run and its hand-offs across processes.
func TestMain(m *testing.M) {
	if isChild(os.Args[1:]) {
		cmdline.Main("redisgate child", runChild)
	}
	os.Exit(m.Run())
}

// tiny cuts every measurement down, so that a run takes a few seconds
// under the race detector, and keeps the three children.
var tiny = []string{
	"--json",
	"--iterations", "200",
	"--processes", "3", "--duration", "1s",
	"--handoffs", "50",
}

// TestRun runs the whole program at a tiny scale on the test Redis and
// checks what must hold whatever the timings: the capacity was never
// exceeded, every child reported, and every measurement has its samples.
func TestRun(t *testing.T) {
	t.Parallel()
	url := os.Getenv(envRedis)
	if url == "" {
		t.Skipf("%s is unset", envRedis)
	}
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), append(tiny, "--redis", url), &stdout, &stderr); err != nil {
		t.Fatalf("run: %v; stderr: %s", err, stderr.String())
	}
	var rep report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("decoding the report: %v\n%s", err, stdout.String())
	}
	if len(rep.Contended) != 2 {
		t.Fatalf("got %d contended rows, want 2 (gate, redisgate)", len(rep.Contended))
	}
	for _, row := range rep.Contended {
		if row.MaxHoldersCounter > int64(row.Capacity) || row.MaxHoldersClock > row.Capacity {
			t.Errorf("%s: got at most %d holders by the counter, %d by the clock; want at most the capacity, %d",
				row.Gate, row.MaxHoldersCounter, row.MaxHoldersClock, row.Capacity)
		}
		if row.Reported != row.Processes || row.Missing != "" || row.Grants == 0 || row.Errors != 0 {
			t.Errorf("%s: got %d of %d processes reporting (%s), %d grants, %d errors (%s); want all, some grants, no errors",
				row.Gate, row.Reported, row.Processes, row.Missing, row.Grants, row.Errors, row.FirstError)
		}
	}
	if p := rep.Contended[1].Processes; p != 3 {
		t.Errorf("redisgate contended across %d processes, want 3", p)
	}
	shared := rep.Uncontended[len(rep.Uncontended)-1]
	if shared.RoundTrips == nil || *shared.RoundTrips != 2 {
		t.Errorf("redisgate: got %v round trips per acquire+release, want 2", shared.RoundTrips)
	}
	if len(rep.Handoff) != 3 {
		t.Fatalf("got %d hand-off rows, want 3", len(rep.Handoff))
	}
	for _, row := range rep.Handoff {
		if row.Took.N != 50 || row.Took.P50 <= 0 || row.Took.P99 < row.Took.P50 {
			t.Errorf("%s, %s: got %d hand-offs, p50 %v µs, p99 %v µs; want 50, 0 < p50 <= p99",
				row.Gate, row.Setup, row.Took.N, row.Took.P50, row.Took.P99)
		}
	}
	for _, c := range rep.Checks {
		if !c.Passed {
			t.Errorf("check failed: %s", c.Line())
		}
	}
}

// TestUnreachable checks that a run with no Redis to talk to stops at once
// with one line that says so, not a usage error. It needs no Redis.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	err := run(t.Context(), []string{"--redis", "redis://127.0.0.1:1/0"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "redis at 127.0.0.1:1 is unreachable") {
		t.Fatalf("got %v, want an error saying redis at 127.0.0.1:1 is unreachable", err)
	}
	if errors.As(err, new(usageError)) {
		t.Errorf("got a usage error, %v; want a plain one: the command line was good", err)
	}
}

// TestUsage checks that bad command lines are usage errors, before any
// Redis is dialed.
func TestUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--redis", "http://127.0.0.1:6379"},      // not a Redis URL
		{"--processes", "3", "--goroutines", "2"}, // a process without a goroutine
		{"--capacity", "0"},
		{"--child=contend"}, // the hidden flag is the children's alone
		{"extra"},
	} {
		err := run(t.Context(), args, io.Discard, io.Discard)
		if !errors.As(err, new(usageError)) {
			t.Errorf("%q: got %v, want a usage error", args, err)
		}
	}
}
