package server_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/server"
)

// The upstream's bound, the gate key "", reads the same through Redis and,
// while Redis cannot be reached, through this process's own gate, which
// stands in: a request in it shows in flight, where health looks.
func TestRedisLoad(t *testing.T) {
	for _, c := range []struct {
		name, redis, state string
	}{
		{"shared", os.Getenv("OUTLAST_TEST_REDIS"), "ok"},
		{"degraded", "redis://" + closedAddr(t) + "/0", "degraded"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.redis == "" {
				t.Skip("OUTLAST_TEST_REDIS is unset")
			}
			arrived, release := make(chan struct{}), make(chan struct{})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				close(arrived) // the test sends one request
				<-release
				w.Write([]byte(`{}`))
			}))
			t.Cleanup(up.Close)
			u, _ := url.Parse(up.URL) // a new name, and so new Redis keys, each run
			srv, err := server.New(t.Context(), server.Config{
				Gateway: gateway.Config{Upstreams: []gateway.Upstream{{URL: u, Slots: 2}}, Logger: slog.New(slog.DiscardHandler)},
				Journal: "off",
				Redis:   c.redis,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Close(context.Background()) })
			done := make(chan int)
			go func() {
				rec := httptest.NewRecorder()
				srv.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{}`)))
				done <- rec.Code
			}()
			select {
			case <-arrived:
			case code := <-done:
				t.Fatalf("the request ended %d before it reached the upstream", code)
			}
			h := srv.Gateway.Health()
			if h.Gate.State != c.state {
				t.Errorf("the gate's state: got %q, want %q", h.Gate.State, c.state)
			}
			if got := h.Upstreams[0].InFlight; got != 1 {
				t.Errorf("in flight: got %d, want 1", got)
			}
			close(release)
			if code := <-done; code != 200 {
				t.Errorf("the request: got %d, want 200", code)
			}
		})
	}
}

// The first health read of a gateway whose Redis cannot be reached says
// degraded, before any request has found it gone: health's own reads of
// the gates find it.
func TestRedisHealthFirstRead(t *testing.T) {
	u, _ := url.Parse("http://127.0.0.1:1")
	// With slots, whose loads the health reads, and without: a gateway
	// with nothing in Redis to read yet still says so.
	for _, slots := range []int{2, 0} {
		srv, err := server.New(t.Context(), server.Config{
			Gateway: gateway.Config{Upstreams: []gateway.Upstream{{URL: u, Slots: slots}}, Logger: slog.New(slog.DiscardHandler)},
			Journal: "off",
			Redis:   "redis://" + closedAddr(t) + "/0",
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := srv.Gateway.Health().Gate.State; got != "degraded" {
			t.Errorf("slots %d: the gate's state at the first read: got %q, want degraded", slots, got)
		}
		srv.Close(context.Background())
	}
}
