package gateway_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
)

// lineHandler keeps the records it is handed, and asLines the request
// lines it is handed.
type lineHandler struct {
	mu    sync.Mutex
	recs  []slog.Record
	lines []gateway.RequestLine
}

func (h *lineHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *lineHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *lineHandler) WithGroup(string) slog.Handler            { return h }
func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// asLines is a lineHandler that is a RequestLineHandler too.
type asLines struct{ *lineHandler }

func (h asLines) HandleRequestLine(_ context.Context, l gateway.RequestLine) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, l)
	return nil
}

// TestRequestLine checks the request's log line: a handler gets it as a
// Record of its nine attributes, and a RequestLineHandler as its fields
// and not as a Record as well.
func TestRequestLine(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines bool
	}{{"Handler", false}, {"RequestLineHandler", true}} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, status(503, `{"error":"busy"}`), status(200, `{"ok":true}`))
			u, _ := url.Parse(up.URL)
			lh := &lineHandler{}
			var h slog.Handler = lh
			if tc.lines {
				h = asLines{lh}
			}
			g, err := gateway.New(gateway.Config{
				Upstreams: []gateway.Upstream{{Name: "api", URL: u, Policy: &outlast.Policy{Waits: []time.Duration{time.Millisecond}}}},
				Logger:    slog.New(h),
			})
			if err != nil {
				t.Fatal(err)
			}
			s := httptest.NewServer(g)
			resp, _ := send(t, http.MethodPost, s.URL+"/v1/chat/completions?x=1", chat, map[string]string{"Outlast-Run": "run-1"})
			// The line comes after the caller has the answer: Close waits
			// for the handler to return.
			s.Close()
			want := gateway.RequestLine{
				ID: resp.Header.Get(gateway.HeaderRequestID), Run: "run-1", Method: "POST", Path: "/v1/chat/completions",
				Upstream: "api", Status: 200, Attempts: 2,
			}
			lh.mu.Lock()
			defer lh.mu.Unlock()
			var got []gateway.RequestLine
			if tc.lines {
				got = lh.lines
			}
			for _, r := range lh.recs {
				if r.Message != "outlast: request" {
					continue
				}
				if tc.lines {
					t.Errorf("a RequestLineHandler was handed the line as a Record too")
				}
				if r.Level != slog.LevelInfo {
					t.Errorf("the line's level is %v, want INFO", r.Level)
				}
				l := gateway.RequestLine{End: r.Time}
				var keys []string
				r.Attrs(func(a slog.Attr) bool {
					keys = append(keys, a.Key)
					switch a.Key {
					case "id":
						l.ID = a.Value.String()
					case "run":
						l.Run = a.Value.String()
					case "method":
						l.Method = a.Value.String()
					case "path":
						l.Path = a.Value.String()
					case "upstream":
						l.Upstream = a.Value.String()
					case "status":
						l.Status = int(a.Value.Int64())
					case "attempts":
						l.Attempts = int(a.Value.Int64())
					case "took":
						l.Took = a.Value.Duration()
					case "error":
						l.Error = a.Value.String()
					}
					return true
				})
				if want := []string{"id", "run", "method", "path", "upstream", "status", "attempts", "took", "error"}; !slices.Equal(keys, want) {
					t.Errorf("the line's keys are %v, want %v", keys, want)
				}
				got = append(got, l)
			}
			if len(got) != 1 {
				t.Fatalf("got %d request lines, want 1", len(got))
			}
			l := got[0]
			if l.End.IsZero() || l.Took <= 0 || l.Took > time.Minute {
				t.Errorf("the line's time %v and took %v: want the request's end and its duration", l.End, l.Took)
			}
			l.End, l.Took = time.Time{}, 0
			if l != want {
				t.Errorf("the line is %+v, want %+v", l, want)
			}
		})
	}
}
