package journal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/journal"
	"github.com/outlast-llm/outlast/record"
)

// The record through the gateway: a request retried past a 503 is stored
// with both attempts, the first carrying its wait, and the API serves it
// by list, by ID and by run; bad parameters are refused by name.
func TestAPIThroughGateway(t *testing.T) {
	var n atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, `{"ok":true}`)
	}))
	defer up.Close()
	store, err := journal.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "j.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	w := journal.NewWriter(store, journal.WriterConfig{FlushInterval: time.Millisecond})
	u, _ := url.Parse(up.URL)
	api := &journal.API{Store: store}
	done := make(chan struct{}, 1)
	g, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{{Name: "up", URL: u, Policy: &outlast.Policy{Waits: []time.Duration{20 * time.Millisecond}}}},
		Logger:    slog.New(slog.DiscardHandler),
		// done tells when the journal's observer has the record: the
		// caller may have the whole answer before the request is done.
		Observer:  record.Observers(journal.Observer(w, journal.ObserverConfig{Headers: true}), record.Observer{Done: func(*record.Request) { done <- struct{}{} }}),
		Endpoints: api.Endpoints(),
	})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(g)
	defer s.Close()

	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m1"}`))
	req.Header.Set("Outlast-Run", "run 7")
	req.Header.Set("Authorization", "Bearer sk-secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	id := resp.Header.Get("Outlast-Request-Id")
	<-done
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	var rec record.Request
	getJSON(t, s.URL+"/outlast/requests/"+id, 200, &rec)
	if rec.Run != "run 7" || rec.Model != "m1" || rec.Status != 200 || len(rec.Attempts) != 2 {
		t.Fatalf("got %+v, want run 7, model m1, 200, 2 attempts", rec)
	}
	a1, a2 := rec.Attempts[0], rec.Attempts[1]
	if a1.Status != 503 || a1.RetryIn != 20*time.Millisecond || a1.Class != outlast.ClassStatus5xx || a2.Status != 200 || a2.RetryIn != 0 || a2.Bytes != 11 {
		t.Errorf("got attempts %+v and %+v", a1, a2)
	}
	// Each attempt names the upstream it went to; neither moved.
	if a1.Upstream != "up" || a2.Upstream != "up" || a1.Fallback != "" || a2.Fallback != "" {
		t.Errorf("attempts' upstreams: got %q (%q) and %q (%q), want up and up, no fallback", a1.Upstream, a1.Fallback, a2.Upstream, a2.Fallback)
	}
	if rec.Header["Authorization"] != nil {
		t.Error("the record holds the Authorization header")
	}

	var page journal.Page
	getJSON(t, s.URL+"/outlast/requests?run=run+7&status=200&limit=5&since=1h", 200, &page)
	if len(page.Requests) != 1 || page.Requests[0].ID != id {
		t.Errorf("list: got %d records, want the one", len(page.Requests))
	}
	var run struct {
		Run      string           `json:"run"`
		Requests []record.Request `json:"requests"`
	}
	getJSON(t, s.URL+"/outlast/runs/run%207", 200, &run)
	if run.Run != "run 7" || len(run.Requests) != 1 || len(run.Requests[0].Attempts) != 2 {
		t.Errorf("run: got %+v", run)
	}

	for _, c := range []struct{ query, names string }{
		{"status=abc", "status"},
		{"limit=0", "limit"},
		{"since=yesterday", "since"},
		{"cursor=%21%21", "cursor"},
		{"colour=red", "colour"},
	} {
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		getJSON(t, s.URL+"/outlast/requests?"+c.query, 400, &e)
		if !strings.Contains(e.Error.Message, c.names) {
			t.Errorf("%s: got error %q, want one naming %s", c.query, e.Error.Message, c.names)
		}
	}
	// One shape for a list of requests, whether a page or a run: the
	// list is under "requests".
	for _, path := range []string{"/outlast/requests", "/outlast/runs/run%207"} {
		var shape map[string]json.RawMessage
		getJSON(t, s.URL+path, 200, &shape)
		if _, ok := shape["requests"]; !ok || shape["records"] != nil {
			t.Errorf("%s: got keys %v, want the list under \"requests\"", path, keysOf(shape))
		}
	}
	// One shape and one vocabulary for errors, the gateway's own: the
	// kind in Outlast-Error and, prefixed, in the error's type.
	for _, c := range []struct {
		method, path string
		status       int
		kind         string
	}{
		{"GET", "/outlast/requests/nope", 404, "not-found"},
		{"GET", "/outlast/runs/nope", 404, "not-found"},
		{"GET", "/outlast/requests?limit=0", 400, "invalid"},
		{"POST", "/outlast/requests", 405, "method"},
		{"GET", "/outlast/nothing-here", 404, "not-found"},
	} {
		req, _ := http.NewRequest(c.method, s.URL+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Type  string `json:"type"`
			Error struct{ Type, Message string }
		}
		err = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		want := "outlast_" + strings.ReplaceAll(c.kind, "-", "_")
		if err != nil || resp.StatusCode != c.status || resp.Header.Get("Outlast-Error") != c.kind || e.Type != "error" || e.Error.Type != want || e.Error.Message == "" {
			t.Errorf("%s %s: got %d, Outlast-Error %q, %+v (%v); want %d, %q, type %s with a message",
				c.method, c.path, resp.StatusCode, resp.Header.Get("Outlast-Error"), e, err, c.status, c.kind, want)
		}
	}
}

func keysOf(m map[string]json.RawMessage) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

func getJSON(t *testing.T, url string, status int, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("GET %s: got %d %s, want %d", url, resp.StatusCode, b, status)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, b)
	}
}

// A request that fell back is served with its moves, from where to
// where and why, each attempt's upstream and, on the first attempt after
// the move, why it moved; an attempt that did not move has no "fallback"
// at all.
func TestAPIFallback(t *testing.T) {
	t.Parallel()
	s := open(t, sqliteBackend.fresh(t))
	r := request("fb", "", t0, 200, 2)
	r.Attempts[0].Upstream, r.Attempts[0].Status, r.Attempts[0].Class = "openai", 503, outlast.ClassStatus5xx
	r.Attempts[1].Upstream, r.Attempts[1].Fallback = "azure", "down"
	r.Moves = []record.Move{{From: "openai", To: "azure", Reason: "down"}}
	write(t, s, r)
	var got struct {
		Attempts []map[string]any `json:"attempts"`
		Moves    []map[string]any `json:"moves"`
	}
	getJSON(t, apiGateway(t, &journal.API{Store: s})+"/outlast/requests/fb", 200, &got)
	if len(got.Attempts) != 2 {
		t.Fatalf("got %d attempts, want 2", len(got.Attempts))
	}
	a1, a2 := got.Attempts[0], got.Attempts[1]
	if _, ok := a1["fallback"]; a1["upstream"] != "openai" || ok {
		t.Errorf("attempt 1: got upstream %v, fallback %v; want openai and no fallback key", a1["upstream"], a1["fallback"])
	}
	if a2["upstream"] != "azure" || a2["fallback"] != "down" {
		t.Errorf("attempt 2: got upstream %v, fallback %v; want azure, down", a2["upstream"], a2["fallback"])
	}
	if want := []map[string]any{{"from": "openai", "to": "azure", "reason": "down"}}; !reflect.DeepEqual(got.Moves, want) {
		t.Errorf("moves: got %v, want %v", got.Moves, want)
	}
}

// apiGateway serves api's endpoints behind a gateway whose one upstream
// is never asked, and returns its URL.
func apiGateway(t *testing.T, api *journal.API) string {
	t.Helper()
	u, _ := url.Parse("http://127.0.0.1:1")
	g, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{{Name: "up", URL: u}},
		Logger:    slog.New(slog.DiscardHandler),
		Endpoints: api.Endpoints(),
	})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(g)
	t.Cleanup(s.Close)
	return s.URL
}

// The upstreams' state changes are served newest last, selected by
// upstream, since and limit, in the record's form of a time; bad
// parameters are refused by name, as the requests' are.
func TestAPIStates(t *testing.T) {
	t.Parallel()
	s := open(t, sqliteBackend.fresh(t))
	writeStates(t, s, append(outage("anthropic"), outage("openai")...)...)
	base := apiGateway(t, &journal.API{Store: s})

	resp, err := http.Get(base + "/outlast/upstreams/states?upstream=openai&limit=2")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := `{
  "states": [
    {
      "upstream": "openai",
      "at": "2025-03-14T15:09:29.535Z",
      "from": "probing",
      "to": "recovering"
    },
    {
      "upstream": "openai",
      "at": "2025-03-14T15:09:30.535Z",
      "from": "recovering",
      "to": "healthy"
    }
  ]
}
`
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || string(body) != want {
		t.Errorf("got %d %q:\n%s\nwant 200 application/json:\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), body, want)
	}

	type states struct {
		States []struct{ Upstream, At, From, To string } `json:"states"`
	}
	for _, c := range []struct {
		query string
		want  []string // upstream>to, in order
	}{
		// Every upstream's, oldest first.
		{"", []string{"anthropic>down", "openai>down", "anthropic>probing", "openai>probing", "anthropic>down", "anthropic>probing",
			"openai>down", "openai>probing", "anthropic>recovering", "openai>recovering", "anthropic>healthy", "openai>healthy"}},
		// Since, as an RFC 3339 time, is inclusive.
		{"upstream=anthropic&since=2025-03-14T15:09:29.535Z", []string{"anthropic>recovering", "anthropic>healthy"}},
		// Since as a duration ago: these changes are long past.
		{"since=1h", nil},
		// An upstream with no changes: an empty list, never null.
		{"upstream=nobody", nil},
	} {
		var got states
		getJSON(t, base+"/outlast/upstreams/states?"+c.query, 200, &got)
		var names []string
		for _, x := range got.States {
			names = append(names, x.Upstream+">"+x.To)
		}
		if got.States == nil || fmt.Sprint(names) != fmt.Sprint(c.want) {
			t.Errorf("%q: got %v (nil: %v), want %v", c.query, names, got.States == nil, c.want)
		}
	}

	for _, c := range []struct{ query, names string }{
		{"limit=0", "limit"},
		{"limit=1001", "limit"},
		{"limit=x", "limit"},
		{"since=yesterday", "since"},
		{"status=200", "status"},
	} {
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		getJSON(t, base+"/outlast/upstreams/states?"+c.query, 400, &e)
		if !strings.Contains(e.Error.Message, c.names) {
			t.Errorf("%s: got error %q, want one naming %s", c.query, e.Error.Message, c.names)
		}
	}
	resp, err = http.Post(base+"/outlast/upstreams/states", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Outlast-Error") != "method" {
		t.Errorf("POST: got %d %q, want 405 method", resp.StatusCode, resp.Header.Get("Outlast-Error"))
	}
	var e struct {
		Error struct{ Message string } `json:"error"`
	}
	getJSON(t, apiGateway(t, &journal.API{})+"/outlast/upstreams/states", 404, &e)
	if !strings.Contains(e.Error.Message, "journal is off") {
		t.Errorf("with the journal off: got %q, want it said", e.Error.Message)
	}
}

// An outage through a gateway with an Admission reaches the journal: the
// upstream's states as it went down, was probed and came back, and the
// request's attempts, the probe marked with its wait for the upstream.
func TestAPIAdmissionThroughGateway(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 3 {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, `{"ok":true}`)
	}))
	defer up.Close()
	store := open(t, sqliteBackend.fresh(t))
	w := journal.NewWriter(store, journal.WriterConfig{FlushInterval: time.Millisecond, Logger: quiet})
	u, _ := url.Parse(up.URL)
	// The gateway tells of a change after the admission's lock is let
	// go, from the goroutine that made it: the probe's start, from the
	// admission's timer, may be told after the probe's answer.
	done, changed := make(chan struct{}, 1), make(chan struct{}, 64)
	g, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{{
			Name: "up", URL: u,
			Policy: &outlast.Policy{Waits: []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond, time.Millisecond}},
			// The third 503 marks it down; the probe goes 20 ms later.
			Admission: &outlast.Admission{DownAfter: 3, ProbeWaits: []time.Duration{20 * time.Millisecond}},
		}},
		Logger: slog.New(slog.DiscardHandler),
		// The journal's observer has the record, and each change, when
		// these hear of them.
		Observer: record.Observers(journal.Observer(w, journal.ObserverConfig{}), record.Observer{
			Done:          func(*record.Request) { done <- struct{}{} },
			UpstreamState: func(record.StateChange) { changed <- struct{}{} },
		}),
		Endpoints: (&journal.API{Store: store}).Endpoints(),
	})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(g)
	defer s.Close()

	resp, err := http.Post(s.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	id := resp.Header.Get("Outlast-Request-Id")
	<-done
	for range 4 { // down, probing, recovering, healthy
		<-changed
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	var got struct {
		States []struct{ Upstream, At, From, To string } `json:"states"`
	}
	getJSON(t, s.URL+"/outlast/upstreams/states?upstream=up", 200, &got)
	var path []string
	for i, c := range got.States {
		path = append(path, c.From+">"+c.To)
		if i > 0 && c.At < got.States[i-1].At {
			t.Errorf("states: %s at %s comes after %s, later", path[i], c.At, got.States[i-1].At)
		}
	}
	// By the time each was told, which may swap the probe's start and its
	// answer (see above): the changes, in whatever order.
	slices.Sort(path)
	if want := "[down>probing healthy>down probing>recovering recovering>healthy]"; fmt.Sprint(path) != want {
		t.Errorf("states: got %v, want %s", path, want)
	}
	var rec record.Request
	getJSON(t, s.URL+"/outlast/requests/"+id, 200, &rec)
	if resp.StatusCode != 200 || len(rec.Attempts) != 4 {
		t.Fatalf("got %d with %d attempts, want 200 after 4", resp.StatusCode, len(rec.Attempts))
	}
	for i, a := range rec.Attempts[:3] {
		if a.Probe || a.AdmissionWait != 0 {
			t.Errorf("attempt %d, sent while healthy: got probe %v, wait %v; want neither", i+1, a.Probe, a.AdmissionWait)
		}
	}
	if p := rec.Attempts[3]; !p.Probe || p.AdmissionWait <= 0 || p.Status != 200 {
		t.Errorf("attempt 4: got probe %v, wait %v, status %d; want the probe, after a wait, answered 200", p.Probe, p.AdmissionWait, p.Status)
	}
}

// stalledStore is a journal whose reads wait for their context to end, as
// a database that stopped answering does.
type stalledStore struct{ journal.Store }

func (stalledStore) List(ctx context.Context, _ journal.Query) (journal.Page, error) {
	<-ctx.Done()
	return journal.Page{}, ctx.Err()
}

// A read of a store that does not answer ends at ReadTimeout with a 504,
// rather than holding the caller and the handler for as long as the
// database is silent.
func TestAPIReadTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := (&journal.API{Store: stalledStore{}}).Endpoints()["requests"]
		rec := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/outlast/requests", nil))
		if rec.Code != http.StatusGatewayTimeout || rec.Header().Get("Outlast-Error") != "timeout" || time.Since(start) != journal.ReadTimeout {
			t.Errorf("got %d %s after %v, want 504 timeout after %v", rec.Code, rec.Header().Get("Outlast-Error"), time.Since(start), journal.ReadTimeout)
		}
	})
}
