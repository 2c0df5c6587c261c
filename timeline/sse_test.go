package timeline_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/record"
	"github.com/outlast-llm/outlast/timeline"
)

// events starts a server for the feed's event stream alone.
func events(t *testing.T, f *timeline.Feed) string {
	t.Helper()
	srv := httptest.NewServer(f.Endpoints()["events"])
	t.Cleanup(srv.Close)
	t.Cleanup(f.Close)
	return srv.URL
}

// stream opens the event stream at url, bounded by the test's life.
func stream(t *testing.T, url string) *sseReader {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("got %d %q, want 200 text/event-stream", resp.StatusCode, ct)
	}
	return newSSEReader(resp.Body)
}

func TestEventsSnapshotThenEvents(t *testing.T) {
	t.Parallel()
	f := timeline.New(0, 0)
	obs := f.Observer()
	old := request("old", "earlier")
	obs.Done(old)
	s := stream(t, events(t, f))

	ev := s.nextNamed(t)
	snap := decode[timeline.Snapshot](t, ev.data)
	if ev.name != "snapshot" || len(snap.Requests) != 1 || snap.Requests[0].ID != "old" {
		t.Fatalf("first event: got %s with %d requests, want a snapshot with request old", ev.name, len(snap.Requests))
	}

	r := request("new", "now")
	a := attempt(1, 0, time.Second, 200, nil)
	steps := []struct {
		name  string
		call  func()
		state string
	}{
		{"queued", func() { obs.Queued(r, "", 1) }, timeline.StateQueued},
		{"attempt-start", func() { obs.AttemptStart(r, a) }, timeline.StateSending},
		{"attempt-end", func() { r.Attempts = append(r.Attempts, a); obs.AttemptEnd(r, a) }, timeline.StateWaiting},
		{"done", func() { r.Status, r.End = 200, t0.Add(time.Second); obs.Done(r) }, timeline.StateDone},
	}
	for _, step := range steps {
		step.call()
		ev := s.nextNamed(t)
		got := decode[timeline.Request](t, ev.data)
		if ev.name != step.name || got.ID != "new" || got.State != step.state {
			t.Errorf("got event %s for %s in state %s, want %s for new in state %s", ev.name, got.ID, got.State, step.name, step.state)
		}
	}
}

func TestEventsSendUpstreamsOnChange(t *testing.T) {
	t.Parallel()
	f := timeline.New(0, 0)
	var mu sync.Mutex
	queued := 0
	f.SetLoads(func() []record.Load {
		mu.Lock()
		defer mu.Unlock()
		return []record.Load{{Upstream: "mock", Slots: 1, Queued: queued}}
	})
	s := stream(t, events(t, f))
	if ev := s.nextNamed(t); ev.name != "snapshot" {
		t.Fatalf("first event: got %s, want snapshot", ev.name)
	}
	mu.Lock()
	queued = 3
	mu.Unlock()
	// No request event tells of it: the stream's look every second does.
	ev, err := s.next()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ev.data, `"queued":3`) || ev.name != "upstreams" {
		t.Errorf("got %s %s, want upstreams with queued 3", ev.name, ev.data)
	}
}

// TestSlowClientNeverBlocksTheObserver has a client that never reads past
// the snapshot, and more events than the sockets can hold. If the
// Observer waited for the client, the loop would never end.
func TestSlowClientNeverBlocksTheObserver(t *testing.T) {
	t.Parallel()
	f := timeline.New(50, 0)
	url := events(t, f)

	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(conn)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "event: snapshot") {
			break // subscribed; from now on, read nothing
		}
	}

	// 3,000 events of 32 KiB are far more than the sockets' buffers and
	// the client's mailbox.
	obs := f.Observer()
	path := "/" + strings.Repeat("p", 32<<10)
	for i := range 3000 {
		r := request(fmt.Sprint(i), "slow")
		r.Path = path
		obs.Queued(r, "", 0)
	}
	if got := f.Snapshot().Dropped; got == 0 {
		t.Errorf("dropped %d events, want some", got)
	}
}

// TestCloseEndsStreams checks that a closed feed ends its streams, so
// that a graceful shutdown need not wait for them.
func TestCloseEndsStreams(t *testing.T) {
	t.Parallel()
	f := timeline.New(0, 0)
	url := events(t, f)
	s := stream(t, url)
	if ev := s.nextNamed(t); ev.name != "snapshot" {
		t.Fatalf("first event: got %s, want snapshot", ev.name)
	}
	f.Close()
	for {
		if _, err := s.next(); err != nil {
			break // the stream ended
		}
	}
	resp, _ := get(t, client(t), url)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("after Close: got %d, want 503", resp.StatusCode)
	}
}

// recorder is a ResponseWriter that a test may read while the handler
// writes.
type recorder struct {
	mu     sync.Mutex // guards buf
	buf    bytes.Buffer
	header http.Header
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(int)     {}
func (r *recorder) Flush()              {}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.Write(p)
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}

func TestEventsHeartbeat(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := timeline.New(0, 0)
		ctx, cancel := context.WithCancel(context.Background())
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/outlast/events", nil)
		w := &recorder{header: http.Header{}}
		done := make(chan struct{})
		go func() {
			defer close(done)
			f.Endpoints()["events"].ServeHTTP(w, req)
		}()
		synctest.Wait()
		if !strings.HasPrefix(w.String(), "retry: 2000\n\nevent: snapshot\n") {
			t.Fatalf("stream starts %.60q, want the retry and a snapshot", w.String())
		}
		time.Sleep(14 * time.Second)
		synctest.Wait()
		if strings.Contains(w.String(), ": ping") {
			t.Errorf("a heartbeat before 15s of quiet")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if !strings.Contains(w.String(), "\n: ping\n\n") {
			t.Errorf("no heartbeat after 16s; stream: %q", w.String())
		}
		cancel()
		<-done
	})
}

// TestEventsStates checks that the snapshot holds the changes of the
// upstreams' states so far, and that each later one is an event.
func TestEventsStates(t *testing.T) {
	t.Parallel()
	f := timeline.New(0, 0)
	obs := f.Observer()
	obs.UpstreamState(record.StateChange{Upstream: "mock", At: t0, From: outlast.Healthy, To: outlast.Down})
	s := stream(t, events(t, f))
	ev := s.nextNamed(t)
	snap := decode[timeline.Snapshot](t, ev.data)
	if ev.name != "snapshot" || len(snap.States) != 1 || snap.States[0].To != "down" {
		t.Fatalf("first event: got %s with states %+v, want a snapshot with the change to down", ev.name, snap.States)
	}
	obs.UpstreamState(record.StateChange{Upstream: "mock", At: t0.Add(time.Second), From: outlast.Down, To: outlast.Probing})
	ev = s.nextNamed(t)
	got := decode[timeline.StateChange](t, ev.data)
	want := timeline.StateChange{Upstream: "mock", At: millisOf(t0.Add(time.Second)), From: "down", To: "probing"}
	if ev.name != "state" || got != want {
		t.Errorf("got event %s %+v, want state %+v", ev.name, got, want)
	}
}
