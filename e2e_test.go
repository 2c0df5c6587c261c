package outlast_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
)

// End-to-end tests over real loopback connections. Their waits are a
// millisecond: the timing rules are tested in virtual time elsewhere; these
// test what a real net/http client and server do.

func e2eClient(p *outlast.Policy, fbt time.Duration) *http.Client {
	return &http.Client{Transport: &outlast.Transport{
		Base:             &http.Transport{},
		Policy:           p,
		FirstByteTimeout: fbt,
		Logger:           discardLogger(),
	}}
}

// A server that fails twice and then answers: the client sees the answer
// and the server saw three attempts, numbered by the attempt header.
func TestE2ERetriedToSuccess(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	var mu sync.Mutex // guards headers
	var headers []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		headers = append(headers, r.Header.Get(outlast.AttemptHeader)+":"+string(body))
		mu.Unlock()
		if n.Add(1) <= 2 {
			http.Error(w, `{"error":{"type":"overloaded_error"}}`, 529)
			return
		}
		fmt.Fprint(w, `{"ok":true}`)
	}))
	defer srv.Close()
	resp, err := e2eClient(&outlast.Policy{Waits: ms(1, 1)}, 0).Post(srv.URL, "application/json", strings.NewReader(`{"q":1}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != `{"ok":true}` {
		t.Fatalf("got %d %q, want 200 {\"ok\":true}", resp.StatusCode, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := `1:{"q":1},2:{"q":1},3:{"q":1}`; strings.Join(headers, ",") != want {
		t.Errorf("server saw %v, want %s", headers, want)
	}
}

// A connection closed before the response is retried.
func TestE2EClosedBeforeResponse(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.(*net.TCPConn).SetLinger(0) // a reset, not a clean close
			conn.Close()
			return
		}
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	resp, err := e2eClient(&outlast.Policy{Waits: ms(1)}, 0).Post(srv.URL, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || n.Load() != 2 {
		t.Errorf("got %d after %d attempts, want 200 after 2", resp.StatusCode, n.Load())
	}
}

// A refused connection is retried to the bound, and the caller gets the
// refusal.
func TestE2EConnectionRefused(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1, and no listener on port 0 is given it;
	// a port just closed could be given to a parallel test's listener.
	addr := "127.0.0.1:1"
	var rec recorder
	c := e2eClient(&outlast.Policy{Waits: ms(1, 1)}, 0)
	c.Transport.(*outlast.Transport).Hooks = rec.hooks()
	_, err := c.Get("http://" + addr + "/v1/models")
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("got %v, want connection refused", err)
	}
	if len(rec.ends) != 3 {
		t.Errorf("got %d attempts, want 3", len(rec.ends))
	}
}

// A stream that stalls before its first byte is retried under
// FirstByteTimeout; one that fails after it is not.
func TestE2EStreams(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		first    func(w http.ResponseWriter, r *http.Request)
		wantBody string
		wantErr  bool
		attempts int32
	}{
		// Headers, then silence: nothing reached the caller, so retry.
		{"stall before first byte", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}, "data: fine\n\n", false, 2},
		// One event, then the connection breaks: the event may have been
		// read, so the error goes to the caller and nothing is re-sent.
		{"break after first event", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: one\n\n")
			w.(http.Flusher).Flush()
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		}, "data: one\n\n", true, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) == 1 {
					c.first(w, r)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, "data: fine\n\n")
			}))
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"stream":true}`))
			resp, err := e2eClient(&outlast.Policy{Waits: ms(1), Reserve: -1}, 200*time.Millisecond).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != c.wantBody || (err != nil) != c.wantErr {
				t.Errorf("got %q, %v; want %q, error %v", body, err, c.wantBody, c.wantErr)
			}
			if got := n.Load(); got != c.attempts {
				t.Errorf("server saw %d attempts, want %d", got, c.attempts)
			}
		})
	}
}
