package cli

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/outlast-llm/outlast/mockllm"
)

// --from-first-request reaches the Server; without it the windows start
// when the mock starts.
func TestMockFromFirstRequest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want bool
	}{
		// The default: the script's clock starts at Start.
		{"default", nil, false},
		// The flag: it starts at the first model request.
		{"flag", []string{"--from-first-request"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, _, done, err := mockServer(append(tc.args, "--script", "429 for 5s,ok"), io.Discard)
			if done || err != nil {
				t.Fatalf("got done %v, %v; want a server", done, err)
			}
			if srv.FromFirstRequest != tc.want {
				t.Errorf("FromFirstRequest: got %v, want %v", srv.FromFirstRequest, tc.want)
			}
		})
	}
}

// A port alone is not an address to listen on: a usage error that says
// what to type, before anything listens.
func TestMockListenUsage(t *testing.T) {
	t.Parallel()
	_, _, done, err := mockServer([]string{"--listen", "8799"}, io.Discard)
	if !done || !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "127.0.0.1:8799") {
		t.Errorf("got done %v, %v; want a usage error suggesting 127.0.0.1:8799", done, err)
	}
}

// The mock reads its flag's duration as serve reads its own: bare
// numbers are seconds.
func TestMockChunkDelaySeconds(t *testing.T) {
	t.Parallel()
	for arg, want := range map[string]time.Duration{"1": time.Second, "0.05": 50 * time.Millisecond, "20ms": 20 * time.Millisecond} {
		f, done, err := parseCommand("mock", "", newMockFlags, []string{"--chunk-delay", arg}, io.Discard)
		if done || err != nil || f.chunkDelay != want {
			t.Errorf("--chunk-delay %s: got %v (done %v, %v), want %v", arg, f.chunkDelay, done, err, want)
		}
	}
}

// The limit flags set the mock's Limits, their window read as serve reads
// durations.
func TestMockLimitFlags(t *testing.T) {
	t.Parallel()
	srv, _, done, err := mockServer([]string{"--limit-requests", "60", "--limit-tokens", "90000", "--limit-window", "10"}, io.Discard)
	if done || err != nil {
		t.Fatalf("got done %v, %v", done, err)
	}
	if want := (mockllm.Limits{Requests: 60, Tokens: 90000, Window: 10 * time.Second}); srv.Limits != want {
		t.Errorf("got %+v, want %+v", srv.Limits, want)
	}
	if _, _, _, err := mockServer([]string{"--limit-requests", "-1"}, io.Discard); err == nil {
		t.Error("--limit-requests -1: got no error")
	}
	// The server's zero Chunks means its default, 9: --chunks 0 would
	// silently be 9.
	if _, _, _, err := mockServer([]string{"--chunks", "0"}, io.Discard); err == nil || !strings.Contains(err.Error(), "1 or more") {
		t.Errorf("--chunks 0: got %v, want it refused", err)
	}
}

// --capacity makes a provider of that many completions at once, each
// answered as it comes: without --slots there is no llama.cpp-like slot
// gate behind it, which would serve one at a time. --slots given wins.
func TestMockCapacitySlots(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args  []string
		slots int
	}{
		{nil, 1},
		{[]string{"--capacity", "80"}, 0},
		{[]string{"--capacity", "80", "--slots", "4"}, 4},
		{[]string{"--slots", "0"}, 0},
	} {
		srv, _, done, err := mockServer(c.args, io.Discard)
		if done || err != nil {
			t.Errorf("%q: got done %v, %v", c.args, done, err)
		} else if srv.Slots != c.slots {
			t.Errorf("%q: slots %d, want %d", c.args, srv.Slots, c.slots)
		}
	}
}
