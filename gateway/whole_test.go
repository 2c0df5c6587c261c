package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/record"
)

// holding starts a gateway in front of up with the given changes to its
// config, and returns its URL, the gateway, and the records of its
// requests as they end.
func holding(t *testing.T, up *upstream, change func(*gateway.Config)) (string, *gateway.Gateway, <-chan record.Request) {
	t.Helper()
	u, _ := url.Parse(up.URL)
	done := make(chan record.Request, 64)
	cfg := gateway.Config{
		Upstreams: []gateway.Upstream{{URL: u, Policy: &outlast.Policy{Waits: []time.Duration{time.Millisecond, time.Millisecond}}}},
		Logger:    slog.New(slog.DiscardHandler),
		Observer:  record.Observer{Done: func(r *record.Request) { done <- *r }},
	}
	if change != nil {
		change(&cfg)
	}
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(g)
	t.Cleanup(s.Close)
	return s.URL, g, done
}

// budget returns the config change that sets the hold budget and max
// body (0 for the defaults).
func budget(held, maxBody int64) func(*gateway.Config) {
	return func(c *gateway.Config) { c.HoldBudget, c.MaxBody = held, maxBody }
}

// answerOf returns a JSON answer of n bytes, its bytes differing with
// seed, so that a part out of place shows.
func answerOf(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + (seed+byte(i%251))%26
	}
	copy(b, `{"x":"`)
	copy(b[n-2:], `"}`)
	return b
}

// known answers with body, its length declared.
func known(body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	}
}

// unknown answers with body chunked, its length unknown until its end.
func unknown(body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		for b := body; len(b) > 0; {
			n := min(len(b), 10000)
			w.Write(b[:n])
			w.(http.Flusher).Flush()
			b = b[n:]
		}
	}
}

// post sends a chat request to url and returns the answer's status and
// body, read whole.
func post(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return resp.StatusCode, b
}

// checkReleased checks that nothing of g's hold budget is taken.
func checkReleased(t *testing.T, g *gateway.Gateway) {
	t.Helper()
	if n := gateway.HeldBytes(g); n != 0 {
		t.Errorf("got %d bytes of the hold budget taken once the requests ended, want 0", n)
	}
}

// TestHoldBudget checks which answers are held whole before their first
// byte goes and which go as they come, and that each reaches the caller
// whole, byte for byte, and is recorded so.
func TestHoldBudget(t *testing.T) {
	t.Parallel()
	const size = 300 << 10
	tests := []struct {
		name            string
		handler         func([]byte) http.HandlerFunc
		budget, maxBody int64
		wantHeld        bool
	}{
		// The common case: the budget has room.
		{"known length within the budget", known, 0, 0, true},
		{"unknown length within the budget", unknown, 0, 0, true},
		// Its length is reserved at once, and does not fit: it goes as
		// it comes, with nothing read ahead.
		{"known length over the budget", known, size - 1, 0, false},
		// Its chunks are reserved as they come, and the budget runs out
		// half-way: what was read goes first, and then the rest.
		{"unknown length over the budget half-way", unknown, 100 << 10, 0, false},
		// Over max body, as before the budget: it goes as it comes.
		{"unknown length over max body", unknown, 0, 100 << 10, false},
	}
	for i, c := range tests {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			want := answerOf(size, byte(i))
			up := newUpstream(t, c.handler(want))
			url, g, done := holding(t, up, budget(c.budget, c.maxBody))
			code, got := post(t, url)
			if code != 200 || !bytes.Equal(got, want) {
				t.Errorf("got %d with %d bytes, want 200 with the %d bytes sent", code, len(got), len(want))
			}
			rec := <-done
			if rec.Held != c.wantHeld || rec.Bytes != size {
				t.Errorf("recorded held %v, %d bytes; want held %v, %d bytes", rec.Held, rec.Bytes, c.wantHeld, size)
			}
			checkReleased(t, g)
		})
	}
}

// TestHoldBudgetEmptyAndStream checks the answers the budget has nothing
// to do with: an empty answer is whole as it comes, and recorded held; a
// stream commits at its first event, and is recorded not held.
func TestHoldBudgetEmptyAndStream(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, known(nil), sse("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n", "data: [DONE]\n\n"))
	url, g, done := holding(t, up, nil)
	if code, got := post(t, url); code != 200 || len(got) != 0 {
		t.Errorf("an empty answer: got %d with %q, want 200 with nothing", code, got)
	}
	if rec := <-done; !rec.Held {
		t.Error("an empty answer: recorded not held, want held")
	}
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if rec := <-done; rec.Held || !rec.Stream {
		t.Errorf("a stream: recorded held %v, stream %v; want not held, a stream", rec.Held, rec.Stream)
	}
	checkReleased(t, g)
}

// TestHoldBudgetConcurrent checks that the answers held at once stay
// within the budget: of six answers of known length that wait half-way,
// two fit and are held, and four go as they come, their first part
// before their rest; every answer reaches its caller whole, and the
// budget is free again once all are done.
func TestHoldBudgetConcurrent(t *testing.T) {
	t.Parallel()
	const n, size, first = 6, 200 << 10, 1000
	release := make(chan struct{})
	var seed sync.Mutex
	next := byte(0)
	answers := map[string][]byte{} // by the id the caller sent
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		seed.Lock()
		body := answerOf(size, next)
		answers[r.Header.Get("X-Id")] = body
		next++
		seed.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.Write(body[:first])
		w.(http.Flusher).Flush()
		<-release
		w.Write(body[first:])
	})
	url, g, done := holding(t, up, budget(2*size+size/2, 0))
	streamed := make(chan struct{}, n)
	type result struct {
		id   string
		body []byte
		err  error
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			id := strconv.Itoa(i)
			req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
			req.Header.Set("X-Id", id)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				results <- result{id: id, err: err}
				return
			}
			defer resp.Body.Close()
			// The status line of an answer that is not a stream comes
			// with its first byte: before its end only if it is not held.
			streamed <- struct{}{}
			b, err := io.ReadAll(resp.Body)
			results <- result{id, b, err}
		}()
	}
	for range n - 2 {
		select {
		case <-streamed:
		case <-time.After(10 * time.Second):
			close(release)
			t.Fatal("four answers did not begin before their upstream's end, want them to go as they come")
		}
	}
	if got := gateway.HeldBytes(g); got != 2*size {
		t.Errorf("got %d bytes held while the answers wait, want %d: two answers", got, 2*size)
	}
	close(release)
	for range n {
		r := <-results
		seed.Lock()
		want := answers[r.id]
		seed.Unlock()
		if r.err != nil || !bytes.Equal(r.body, want) {
			t.Errorf("request %s: got %d bytes, %v; want the %d bytes sent", r.id, len(r.body), r.err, len(want))
		}
	}
	held := 0
	for range n {
		if rec := <-done; rec.Held {
			held++
		}
	}
	if held != 2 {
		t.Errorf("got %d answers recorded held, want 2", held)
	}
	checkReleased(t, g)
}

// cut answers with its length declared, or chunked, and breaks off
// half-way.
func cut(size int, declared bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if declared {
			w.Header().Set("Content-Length", strconv.Itoa(size))
		}
		w.Write(answerOf(size/2, 0))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
}

// TestHoldBudgetReleased checks that an answer's reservation is given
// back however its attempt ends: a body that broke off, retried or not;
// a failure that is retried; a caller that left before the answer ended,
// while it was held or while it was sent.
func TestHoldBudgetReleased(t *testing.T) {
	t.Parallel()
	const size = 300 << 10
	want := answerOf(size, 7)
	for _, declared := range []bool{true, false} {
		// A chunked answer cut short is no clean end either.
		t.Run("broke off, then whole, declared "+strconv.FormatBool(declared), func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, cut(size, declared), known(want))
			url, g, done := holding(t, up, nil)
			if code, got := post(t, url); code != 200 || !bytes.Equal(got, want) {
				t.Errorf("got %d with %d bytes, want 200 with the second attempt's %d", code, len(got), len(want))
			}
			if rec := <-done; len(rec.Attempts) != 2 || !rec.Held {
				t.Errorf("got %d attempts, held %v; want 2, held", len(rec.Attempts), rec.Held)
			}
			checkReleased(t, g)
		})
	}
	t.Run("broke off every time", func(t *testing.T) {
		t.Parallel()
		up := newUpstream(t, cut(size, true))
		url, g, done := holding(t, up, nil)
		if code, _ := post(t, url); code != http.StatusBadGateway {
			t.Errorf("got %d, want 502", code)
		}
		if rec := <-done; len(rec.Attempts) != 3 || rec.Held {
			t.Errorf("got %d attempts, held %v; want 3, not held", len(rec.Attempts), rec.Held)
		}
		checkReleased(t, g)
	})
	t.Run("a long failure retried", func(t *testing.T) {
		t.Parallel()
		busy := func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(size))
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write(answerOf(size, 1))
		}
		up := newUpstream(t, busy, known(want))
		url, g, done := holding(t, up, nil)
		if code, got := post(t, url); code != 200 || !bytes.Equal(got, want) {
			t.Errorf("got %d with %d bytes, want 200 with the second attempt's %d", code, len(got), len(want))
		}
		<-done
		checkReleased(t, g)
	})
	t.Run("the caller left while it was held", func(t *testing.T) {
		t.Parallel()
		up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(size))
			w.Write(want[:size/2])
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		})
		// The caller leaves once the answer's headers have come, its
		// length declared: from then on it is held.
		ctx, cancel := context.WithCancel(t.Context())
		url, g, done := holding(t, up, func(c *gateway.Config) {
			c.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := http.DefaultTransport.RoundTrip(r)
				cancel()
				return resp, err
			})
		})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
		if _, err := http.DefaultClient.Do(req); !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want the caller's cancellation", err)
		}
		<-done
		checkReleased(t, g)
	})
	t.Run("the caller left while it was sent", func(t *testing.T) {
		t.Parallel()
		// Longer than what the sockets between them buffer.
		long := answerOf(16<<20, 3)
		up := newUpstream(t, known(long))
		url, g, done := holding(t, up, nil)
		resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close() // unread: the connection is closed
		if rec := <-done; !rec.Held {
			t.Error("recorded not held, want held")
		}
		checkReleased(t, g)
	})
}

// TestHoldBudgetNegative checks that a negative budget is refused, as a
// negative max body is.
func TestHoldBudgetNegative(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse("http://127.0.0.1:1")
	_, err := gateway.New(gateway.Config{Upstreams: []gateway.Upstream{{URL: u}}, HoldBudget: -1})
	if err == nil || !strings.Contains(err.Error(), "hold budget -1 is negative") {
		t.Errorf("got %v, want an error that names the hold budget", err)
	}
}
