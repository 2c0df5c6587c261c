package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// tiny is the --quick configuration cut down to a few hundred requests,
// so that the smoke test runs in seconds under the race detector.
var tiny = []string{
	"--quick", "--json",
	"--warmup", "5",
	"--seq-rounds", "2", "--seq", "25", // 50 sequential requests per target and mode
	"--rate", "200", "--rate-time", "200ms", "--slice", "100ms", // 40 open-loop requests
	"--max-rates", "100", "--max-time", "200ms",
	"--max-other", "0", // a busy machine must not stretch a smoke test
}

// TestSmoke runs the whole program at a tiny scale and checks that every
// target answered every request with a 200 and the upstream's body. It
// asserts no timings: only that each path through each proxy works.
func TestSmoke(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), tiny, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v; stderr: %s", err, stderr.String())
	}
	var rep report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("decoding the report: %v\n%s", err, stdout.String())
	}
	want := []string{"direct", "proxy", "gateway", "gateway+gate", "gateway+journal"}
	if got := strings.Join(rep.Targets, ","); got != strings.Join(want, ",") {
		t.Fatalf("targets: got %s, want %s", got, strings.Join(want, ","))
	}
	wantN := map[string]int{"sequential": 50, "200/s": 40}
	if len(rep.Latency) != 4 {
		t.Fatalf("got %d latency rows, want 4 (two phases, two modes)", len(rep.Latency))
	}
	for _, row := range rep.Latency {
		for _, ts := range row.Targets {
			if ts.N != wantN[row.Phase] || ts.Errors != 0 || ts.Dropped != 0 {
				t.Errorf("%s %s %s: got %d requests, %d errors (first: %q), %d dropped; want %d, 0, 0",
					row.Phase, row.Metric, ts.Name, ts.N, ts.Errors, ts.FirstError, ts.Dropped, wantN[row.Phase])
			}
			if ts.P50 <= 0 || ts.P99 < ts.P50 {
				t.Errorf("%s %s %s: got p50 %v µs, p99 %v µs; want 0 < p50 <= p99", row.Phase, row.Metric, ts.Name, ts.P50, ts.P99)
			}
		}
		// Each gateway+X target is tested against the gateway alone.
		var against []string
		for _, c := range row.Against {
			against = append(against, c.Target)
			if c.Rounds < 1 || c.PP50 < 0 || c.PP50 > 1 || c.PP99 < 0 || c.PP99 > 1 {
				t.Errorf("%s %s against %s: got %d rounds, p-values %v and %v; want rounds and p-values in [0, 1]",
					row.Phase, row.Metric, c.Target, c.Rounds, c.PP50, c.PP99)
			}
		}
		if got := strings.Join(against, ","); got != "gateway+gate,gateway+journal" {
			t.Errorf("%s %s: compared with the gateway: %s, want gateway+gate,gateway+journal", row.Phase, row.Metric, got)
		}
	}
	if len(rep.MaxRate) != len(want) {
		t.Fatalf("got %d max-rate results, want %d", len(rep.MaxRate), len(want))
	}
	for _, m := range rep.MaxRate {
		for _, st := range m.Steps {
			if st.Errors != 0 {
				t.Errorf("max rate %s at %g/s: got %d errors, want 0", m.Target, st.Rate, st.Errors)
			}
		}
	}
}

// TestDoChecksAnswers shows that the smoke test can fail: a target that
// answers with the wrong status or body is an error, not a sample.
func TestDoChecksAnswers(t *testing.T) {
	t.Parallel()
	up := newUpstream(3)
	tests := []struct {
		name    string
		stream  bool
		handler http.HandlerFunc
		wantErr bool
	}{
		// The fake upstream itself is the reference: it must pass.
		{"upstream", false, up.ServeHTTP, false},
		{"upstream stream", true, up.ServeHTTP, false},
		// A proxy that mangled the body.
		{"wrong body", false, func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"id":"other"}`)
		}, true},
		// A proxy that lost the stream's last event.
		{"short stream", true, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Write(up.stream[:len(up.stream)-5])
		}, true},
		// A proxy that failed.
		{"status 502", false, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "bad gateway", http.StatusBadGateway)
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(tt.handler)
			t.Cleanup(srv.Close)
			tg := newTarget(tt.name, srv.URL+chatPath, up, requestBodies(0), defaults())
			t.Cleanup(tg.client.CloseIdleConnections)
			_, err := tg.do(context.Background(), tt.stream)
			if (err != nil) != tt.wantErr {
				t.Errorf("do: got error %v, want error: %v", err, tt.wantErr)
			}
		})
	}
}

// TestParseConfig checks that --quick shortens the run but leaves the
// flags given explicitly, and that bad flags are usage errors.
func TestParseConfig(t *testing.T) {
	t.Parallel()
	c, err := parseConfig([]string{"--quick", "--seq", "7"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.SeqPerRound != 7 || c.SeqRounds != 2 || len(c.MaxRates) != 2 {
		t.Errorf("--quick --seq 7: got seq %d, seq-rounds %d, %d max rates; want 7, 2, 2", c.SeqPerRound, c.SeqRounds, len(c.MaxRates))
	}
	c, err = parseConfig([]string{"--serve-args", " --log-level  warn "}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	gws := gateways(c)
	if last := gws[len(gws)-1]; last.name != "gateway+args" || strings.Join(last.args, " ") != "--journal off --log-level warn" {
		t.Errorf("--serve-args: the last gateway target is %s %q, want gateway+args with --journal off --log-level warn", last.name, last.args)
	}
	for _, args := range [][]string{
		{"--max-rates", "2000,1000"}, // not ascending
		{"--rate", "0"},
		{"--slice", "2s", "--rate-time", "1s"},
		{"extra"},
		{"--deployed", "--cpuprofile", "cpu"},  // the profile would be of the client alone
		{"--deployed", "--upstream-idle", "8"}, // serve has no such setting
	} {
		if _, err := parseConfig(args, io.Discard); !errors.As(err, new(usageError)) {
			t.Errorf("%q: got error %v, want a usage error", args, err)
		}
	}
}

// TestPercentiles checks the nearest-rank percentile and the median over
// rounds, which one slow round must not move.
func TestPercentiles(t *testing.T) {
	t.Parallel()
	s := &series{}
	for r := range 3 {
		for i := 1; i <= 100; i++ {
			d := i
			if r == 1 {
				d *= 1000 // a round that another process disturbed
			}
			s.add(usec(d), nil)
		}
		s.endRound()
	}
	if got, want := s.roundPercentile(0.99), usec(99); got != want {
		t.Errorf("roundPercentile(0.99): got %v, want %v", got, want)
	}
	if got, want := s.roundPercentile(0.5), usec(50); got != want {
		t.Errorf("roundPercentile(0.5): got %v, want %v", got, want)
	}
	if got, want := s.percentile(0.99), usec(97000); got != want {
		t.Errorf("percentile(0.99): got %v, want %v", got, want)
	}
}

func usec(n int) time.Duration { return time.Duration(n) * time.Microsecond }
