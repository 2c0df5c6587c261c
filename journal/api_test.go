package journal_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
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
