package gateway_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/mockllm"
	"github.com/outlast-llm/outlast/record"
)

// A llama.cpp server restarting (connections refused, then "Loading
// model" 503s, then up) behind the gateway with admission: once it is
// down, one probe at a time; once a probe is answered, a paced release,
// 2 at first, not the whole queue; and every caller gets its answer.
// This runs in real time over loopback, against outlast mock; what it
// asserts is the order of events, not how long they took.
func TestLlamaRestartWithAdmission(t *testing.T) {
	mock := &mockllm.Server{
		Script: mockllm.MustParseScript("refuse:2s,loading for 2s,ok"),
		// A completion takes 200 ms, so that a round of the release is
		// longer than the gateway's own latency.
		Chunks: 2, ChunkDelay: 100 * time.Millisecond,
	}
	if err := mock.Start(""); err != nil {
		t.Fatal(err)
	}
	defer mock.Close()
	u, _ := url.Parse(mock.URL)
	var mu sync.Mutex
	var attempts []record.Attempt
	var ids []string // attempts[i]'s request
	var states []record.StateChange
	g, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{{
			URL:       u,
			Policy:    &outlast.Policy{Waits: []time.Duration{100 * time.Millisecond}, Reserve: time.Second},
			Admission: &outlast.Admission{ProbeWaits: []time.Duration{200 * time.Millisecond, 400 * time.Millisecond}, MaxLimit: 8},
		}},
		Logger: slog.New(slog.DiscardHandler),
		Observer: record.Observer{
			AttemptEnd: func(r *record.Request, a record.Attempt) {
				mu.Lock()
				attempts = append(attempts, a)
				ids = append(ids, r.ID)
				mu.Unlock()
			},
			UpstreamState: func(c record.StateChange) {
				mu.Lock()
				states = append(states, c)
				mu.Unlock()
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	defer srv.Close()

	const callers = 20
	codes := make([]int, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/completion", strings.NewReader(`{"prompt":"hi"}`))
			req.Header.Set("Outlast-Timeout", "50s")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("caller %d: %v", i, err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Errorf("caller %d: status %d, want 200 after the restart", i, c)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var down, recovering time.Time
	for _, c := range states {
		if c.To == outlast.Down && down.IsZero() {
			down = c.At
		}
		if c.To == outlast.Recovering && recovering.IsZero() {
			recovering = c.At
		}
	}
	if down.IsZero() || recovering.IsZero() {
		t.Fatalf("states %v: want the upstream down, then recovering", states)
	}
	// Every attempt sent after the upstream went down and before it
	// recovered is a probe, and they do not overlap; but an attempt let
	// through before the key went down may start just after it on a busy
	// machine, since its start is taken after the Admission let it
	// through. Each caller has at most one such: its next waits for the
	// upstream, and none of those may be sent but the probe.
	var probes []record.Attempt
	unprobed := map[string]int{}
	for i, a := range attempts {
		if a.Start.After(down) && a.Start.Before(recovering) {
			if a.Probe {
				probes = append(probes, a)
				continue
			}
			if unprobed[ids[i]]++; unprobed[ids[i]] > 1 || a.AdmissionWait > 0 {
				t.Errorf("attempt %d of request %s (waited %v for the upstream) was sent %v after it went down, before it recovered, and is not a probe", a.N, ids[i], a.AdmissionWait, a.Start.Sub(down))
			}
		}
	}
	slices.SortFunc(probes, func(a, b record.Attempt) int { return a.Start.Compare(b.Start) })
	for i := 1; i < len(probes); i++ {
		if probes[i].Start.Before(probes[i-1].End) {
			t.Errorf("probe %d started before probe %d ended: two at once", i+1, i)
		}
	}
	if len(probes) == 0 || len(probes) > 12 {
		t.Errorf("%d probes over a 4 s restart, want 1 to 12 (every 200 ms, then 400 ms)", len(probes))
	}
	// The release is paced: in the first completion's time after the
	// probe was answered, at most 2 attempts start besides it.
	started := 0
	for _, a := range attempts {
		if !a.Start.Before(recovering) && a.Start.Before(recovering.Add(150*time.Millisecond)) {
			started++
		}
	}
	if started > 2 {
		t.Errorf("%d attempts started within 150 ms of recovering, want at most 2: the queue is released under a limit", started)
	}
	if st := mock.Stats(); st.Paths["/completion"]["loading"] > 12 {
		t.Errorf("the server answered %d requests with loading, want at most the probes' 12", st.Paths["/completion"]["loading"])
	}
}
