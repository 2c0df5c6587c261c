package outlast_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gate"
	"github.com/outlast-llm/outlast/internal/owned"
)

// 503, 529 and a refused connection are retried to success, and to the
// bound.
func TestTransportRetriesToSuccessAndToBound(t *testing.T) {
	failures := []struct {
		name string
		fail step
	}{
		{"503", step{status: 503}},
		{"529 overloaded", step{status: 529, body: `{"type":"error","error":{"type":"overloaded_error"}}`}},
		{"connection refused", step{err: errRefused}},
	}
	for _, f := range failures {
		// Two failures, then an answer: the caller sees the answer.
		t.Run(f.name+"/success", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := newFake(f.fail, f.fail, step{body: "ok"})
				tr := &outlast.Transport{Base: fake, Policy: &outlast.Policy{Waits: outlast.Exponential(time.Second, 8*time.Second, 3)}, Logger: discardLogger()}
				code, body, err := get(t, context.Background(), tr)
				if err != nil || code != 200 || body != "ok" {
					t.Fatalf("got %d %q %v, want 200 ok", code, body, err)
				}
				if n := len(fake.attempts()); n != 3 {
					t.Errorf("got %d attempts, want 3", n)
				}
			})
		})
		// Failures past the bound: the caller sees the last failure.
		t.Run(f.name+"/bound", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := newFake(f.fail)
				tr := &outlast.Transport{Base: fake, Policy: &outlast.Policy{Waits: ms(1, 2), MaxAttempts: 3}, Logger: discardLogger()}
				code, _, err := get(t, context.Background(), tr)
				if f.fail.err != nil {
					if !errors.Is(err, f.fail.err) {
						t.Fatalf("got %v, want the transport error", err)
					}
				} else if err != nil || code != f.fail.status {
					t.Fatalf("got %d %v, want %d", code, err, f.fail.status)
				}
				if n := len(fake.attempts()); n != 3 {
					t.Errorf("got %d attempts, want 3", n)
				}
			})
		})
	}
}

// With RetryAfterExact, Retry-After: 5 replaces the exponential wait and
// waits exactly 5 s of virtual time.
func TestTransportRetryAfterExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(step{status: 503, header: map[string]string{"Retry-After": "5"}}, step{})
		p := &outlast.Policy{Waits: []time.Duration{time.Minute}, RetryAfter: outlast.RetryAfterExact}
		tr := &outlast.Transport{Base: fake, Policy: p, Logger: discardLogger()}
		start := time.Now()
		if code, _, err := get(t, context.Background(), tr); err != nil || code != 200 {
			t.Fatalf("got %d %v, want 200", code, err)
		}
		if got := time.Since(start); got != 5*time.Second {
			t.Errorf("waited %v, want 5s", got)
		}
	})
}

// How the server's delay combines with the wait, mode by mode.
func TestTransportRetryAfterModes(t *testing.T) {
	cases := []struct {
		name   string
		mode   outlast.RetryAfterMode
		wait   time.Duration
		header string
		want   time.Duration
	}{
		// At-least takes the longer of the two...
		{"at-least, server longer", outlast.RetryAfterAtLeast, 2 * time.Second, "5", 5 * time.Second},
		// ...so a short server delay never shortens the policy's wait.
		{"at-least, server shorter", outlast.RetryAfterAtLeast, 10 * time.Second, "5", 10 * time.Second},
		// Exact follows the server even when it asks for less.
		{"exact, server shorter", outlast.RetryAfterExact, 10 * time.Second, "5", 5 * time.Second},
		// Ignore never looks at the header.
		{"ignore", outlast.RetryAfterIgnore, 2 * time.Second, "5", 2 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := newFake(step{status: 429, header: map[string]string{"Retry-After": c.header}}, step{})
				p := &outlast.Policy{Waits: []time.Duration{c.wait}, RetryAfter: c.mode}
				tr := &outlast.Transport{Base: fake, Policy: p, Logger: discardLogger()}
				start := time.Now()
				if _, _, err := get(t, context.Background(), tr); err != nil {
					t.Fatal(err)
				}
				if got := time.Since(start); got != c.want {
					t.Errorf("waited %v, want %v", got, c.want)
				}
			})
		})
	}
}

// Jitter never shortens a wait the server asked for, in either mode.
func TestTransportJitterNeverShortensServerDelay(t *testing.T) {
	for _, j := range []outlast.Jitter{{Full: true}, {Spread: 0.5}} {
		synctest.Test(t, func(t *testing.T) {
			for range 50 {
				fake := newFake(step{status: 429, header: map[string]string{"Retry-After-Ms": "5000"}}, step{})
				p := &outlast.Policy{Waits: ms(100), Jitter: j}
				tr := &outlast.Transport{Base: fake, Policy: p, Logger: discardLogger()}
				start := time.Now()
				if _, _, err := get(t, context.Background(), tr); err != nil {
					t.Fatal(err)
				}
				if got := time.Since(start); got < 5*time.Second {
					t.Fatalf("jitter %+v: waited %v, want at least the server's 5s", j, got)
				}
			}
		})
	}
}

// A server delay that breaks a bound ends retrying at once, rather than
// waiting out part of it.
func TestTransportServerDelayBreakingBoundStopsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(step{status: 429, header: map[string]string{"Retry-After": "120"}}, step{})
		p := &outlast.Policy{Waits: ms(10), Reserve: 10 * time.Second}
		tr := &outlast.Transport{Base: fake, Policy: p, Logger: discardLogger()}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
		defer cancel()
		start := time.Now()
		code, _, err := get(t, ctx, tr)
		if err != nil || code != 429 {
			t.Fatalf("got %d %v, want the 429", code, err)
		}
		if got := time.Since(start); got != 0 {
			t.Errorf("returned after %v, want at once", got)
		}
	})
}

// MaxAttempts and Window bound retries with or without a deadline.
func TestTransportAttemptAndWindowBounds(t *testing.T) {
	cases := []struct {
		name string
		p    outlast.Policy
		want int
	}{
		// MaxAttempts counts the first attempt, and caps the deadline's
		// repeats of the last wait.
		{"max attempts", outlast.Policy{Waits: ms(10), MaxAttempts: 3}, 3},
		// Window caps the time from the first attempt to the end of the
		// last wait: 1+10, +10 = 21 s… the third wait would end at 31 s.
		{"window", outlast.Policy{Waits: []time.Duration{10 * time.Second}, Window: 30 * time.Second}, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := newFake(step{status: 503, delay: time.Second})
				tr := &outlast.Transport{Base: fake, Policy: &c.p, Logger: discardLogger()}
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				if _, _, err := get(t, ctx, tr); err != nil {
					t.Fatal(err)
				}
				if n := len(fake.attempts()); n != c.want {
					t.Errorf("got %d attempts, want %d", n, c.want)
				}
			})
		})
	}
}

// An error in the middle of a stream is not retried: the response was
// returned, so its bytes may have reached the caller.
func TestTransportMidStreamErrorNotRetried(t *testing.T) {
	for _, fbt := range []time.Duration{0, time.Second} {
		synctest.Test(t, func(t *testing.T) {
			fake := newFake(step{body: "data: {\"x\":1}\n\n", bodyErr: io.ErrUnexpectedEOF, header: map[string]string{"Content-Type": "text/event-stream"}}, step{body: "never"})
			tr := &outlast.Transport{Base: fake, Policy: &outlast.Policy{Waits: ms(10)}, FirstByteTimeout: fbt, Logger: discardLogger()}
			_, body, err := get(t, context.Background(), tr)
			if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.HasPrefix(body, "data:") {
				t.Fatalf("FirstByteTimeout %v: got %q %v, want the partial stream and its error", fbt, body, err)
			}
			if n := len(fake.attempts()); n != 1 {
				t.Errorf("FirstByteTimeout %v: got %d attempts, want 1", fbt, n)
			}
		})
	}
}

// With FirstByteTimeout, failures before the first body byte are retried,
// and a clean empty body that is not a stream is an answer.
func TestTransportFirstByte(t *testing.T) {
	sse := map[string]string{"Content-Type": "text/event-stream"}
	cases := []struct {
		name     string
		first    step
		wantErr  error // recorded on the first attempt; nil: no retry
		attempts int
	}{
		// A stall before the first byte is cut at the timeout and retried.
		{"stall", step{stall: true, header: sse}, outlast.ErrStalled, 2},
		// Headers that come later than the timeout are a stall too.
		{"slow headers", step{delay: 5 * time.Second}, outlast.ErrStalled, 2},
		// An event stream that ends before its first byte was not answered.
		{"empty stream", step{header: sse}, outlast.ErrClosedEarly, 2},
		// A body that fails before its first byte was not answered either.
		{"body error", step{bodyErr: io.ErrUnexpectedEOF, header: sse}, outlast.ErrClosedEarly, 2},
		// An empty JSON body is a complete answer, not a failure.
		{"empty json", step{header: map[string]string{"Content-Type": "application/json"}}, nil, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := newFake(c.first, step{body: "data: ok\n\n", header: sse})
				var rec recorder
				tr := &outlast.Transport{Base: fake, Policy: &outlast.Policy{Waits: ms(10)}, FirstByteTimeout: 2 * time.Second, Hooks: rec.hooks(), Logger: discardLogger()}
				code, _, err := get(t, context.Background(), tr)
				if err != nil || code != 200 {
					t.Fatalf("got %d %v, want 200", code, err)
				}
				if n := len(fake.attempts()); n != c.attempts {
					t.Fatalf("got %d attempts, want %d", n, c.attempts)
				}
				if got := rec.ends[0].Err; !errors.Is(got, c.wantErr) || (c.wantErr == nil && got != nil) {
					t.Errorf("first attempt's error %v, want %v", got, c.wantErr)
				}
			})
		})
	}
}

// ResponseHeaderTimeout gives up on a silent server sooner than
// FirstByteTimeout would, and leaves a server that sent its headers to
// think before its first event.
func TestTransportResponseHeaderTimeout(t *testing.T) {
	sse := map[string]string{"Content-Type": "text/event-stream"}
	event := "data: {}\n\n"
	cases := []struct {
		name            string
		headers, first  time.Duration // the Transport's bounds
		step            step          // the first attempt's answer
		wantErr         error         // the first attempt's, if it failed
		wantFailedAfter time.Duration // when it failed
	}{
		// No headers in time: given up on at the header bound.
		{"silent", 2 * time.Second, time.Minute, step{delay: time.Hour}, outlast.ErrStalled, 2 * time.Second},
		// Headers at once and the first event late, within the first
		// byte's bound: a model thinking, not a failure.
		{"thinking", 2 * time.Second, time.Minute, step{header: sse, body: event, bodyDelay: 20 * time.Second}, nil, 0},
		// Headers at once and no event ever: the first byte's bound,
		// counted from the send, still ends it.
		{"silent after headers", 2 * time.Second, 10 * time.Second, step{header: sse, stall: true, delay: time.Second}, outlast.ErrStalled, 10 * time.Second},
		// The header bound alone, without a first byte's: a stream
		// that sent its headers is committed at once.
		{"headers only", 2 * time.Second, 0, step{header: sse, body: event, bodyDelay: time.Hour}, nil, 0},
		// A header bound longer than the first byte's is the first
		// byte's.
		{"longer than first byte", time.Minute, 3 * time.Second, step{delay: time.Hour}, outlast.ErrStalled, 3 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := newFake(c.step, step{header: sse, body: event})
				var rec recorder
				tr := &outlast.Transport{Base: fake, Policy: &outlast.Policy{Waits: ms(10)}, Hooks: rec.hooks(), Logger: discardLogger(),
					ResponseHeaderTimeout: c.headers, FirstByteTimeout: c.first}
				req, _ := http.NewRequest(http.MethodPost, "http://model.test/v1/chat/completions", nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatalf("got %v, want a response", err)
				}
				resp.Body.Close()
				wantAttempts := 1
				if c.wantErr != nil {
					wantAttempts = 2
				}
				if n := len(fake.attempts()); n != wantAttempts {
					t.Fatalf("got %d attempts, want %d", n, wantAttempts)
				}
				first := rec.ends[0]
				if !errors.Is(first.Err, c.wantErr) || (c.wantErr == nil && first.Err != nil) {
					t.Fatalf("first attempt's error %v, want %v", first.Err, c.wantErr)
				}
				if c.wantErr != nil {
					if got := first.End.Sub(first.Start); got != c.wantFailedAfter {
						t.Errorf("failed after %v, want %v", got, c.wantFailedAfter)
					}
				}
			})
		})
	}
}

// A stalled first byte is judged at FirstByteTimeout after the attempt was
// sent, not later.
func TestTransportStallTimedFromSend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(step{stall: true})
		tr := &outlast.Transport{Base: fake, FirstByteTimeout: 3 * time.Second}
		start := time.Now()
		_, _, err := get(t, context.Background(), tr)
		if !errors.Is(err, outlast.ErrStalled) {
			t.Fatalf("got %v, want ErrStalled", err)
		}
		if got := time.Since(start); got != 3*time.Second {
			t.Errorf("stalled after %v, want 3s", got)
		}
	})
}

// Every response that is thrown away is closed, and so is the returned
// one once the caller closes it.
func TestTransportClosesDiscardedResponses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(step{status: 503, body: "down"}, step{status: 502, body: "down"}, step{body: "ok"})
		tr := &outlast.Transport{Base: fake, Policy: &outlast.Policy{Waits: ms(1, 1)}, Logger: discardLogger()}
		if _, _, err := get(t, context.Background(), tr); err != nil {
			t.Fatal(err)
		}
		if got := fake.closedBodies(); got != 3 {
			t.Errorf("got %d bodies closed, want 3", got)
		}
	})
}

// The body is replayed on each attempt: from GetBody, from the
// Transport's own buffer when there is no GetBody, and not at all when it
// is too large to buffer, in which case the request is sent once.
func TestTransportReplaysBody(t *testing.T) {
	const payload = `{"model":"m","messages":[]}`
	cases := []struct {
		name     string
		body     func() io.Reader
		limit    int64
		attempts int
	}{
		// http.NewRequest sets GetBody for a strings.Reader.
		{"GetBody", func() io.Reader { return strings.NewReader(payload) }, 0, 3},
		// A reader it does not know gets no GetBody: buffered.
		{"buffered", func() io.Reader { return io.MultiReader(strings.NewReader(payload)) }, 0, 3},
		// Larger than the limit: sent once, whole, and not retried.
		{"too large", func() io.Reader { return io.MultiReader(strings.NewReader(payload)) }, 5, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := newFake(step{status: 503})
				tr := &outlast.Transport{Base: fake, Policy: &outlast.Policy{Waits: ms(1, 1)}, MaxBufferedBody: c.limit, Logger: discardLogger()}
				req, _ := http.NewRequest(http.MethodPost, "http://model.test/v1/messages", c.body())
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				got := fake.attempts()
				if len(got) != c.attempts {
					t.Fatalf("got %d attempts, want %d", len(got), c.attempts)
				}
				for i, s := range got {
					if s.body != payload {
						t.Errorf("attempt %d sent body %q, want %q", i+1, s.body, payload)
					}
				}
			})
		})
	}
}

// The caller's request is never changed: the attempt header goes on a copy.
func TestTransportDoesNotChangeCallersRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(step{status: 503}, step{})
		tr := &outlast.Transport{Base: fake, Policy: &outlast.Policy{Waits: ms(1)}, Logger: discardLogger()}
		req, _ := http.NewRequest(http.MethodGet, "http://model.test/", nil)
		req.Header.Set("Authorization", "Bearer sk-secret")
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if req.Header.Get(outlast.AttemptHeader) != "" || len(req.Header) != 1 {
			t.Errorf("caller's header changed: %v", req.Header)
		}
		if got := []string{fake.attempts()[0].attempt, fake.attempts()[1].attempt}; got[0] != "1" || got[1] != "2" {
			t.Errorf("got attempt headers %v, want [1 2]", got)
		}
	})
}

// Hooks see each attempt's start and end, in order, with time-ordered call
// IDs, and the last end before RoundTrip returns.
func TestTransportHooksOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(step{status: 503, header: map[string]string{"Retry-After": "2"}}, step{err: errRefused}, step{})
		var rec recorder
		ctxRec := recorder{}
		tr := &outlast.Transport{Base: fake, Policy: &outlast.Policy{Waits: ms(10, 10)}, Hooks: rec.hooks(), Logger: discardLogger()}
		ctx := outlast.WithHooks(context.Background(), ctxRec.hooks())
		if _, _, err := get(t, ctx, tr); err != nil {
			t.Fatal(err)
		}
		want := "start 1,end 1,start 2,end 2,start 3,end 3"
		for _, r := range []*recorder{&rec, &ctxRec} {
			if got := strings.Join(r.events, ","); got != want {
				t.Errorf("got events %s, want %s", got, want)
			}
		}
		e := rec.ends
		if e[0].Status != 503 || e[0].RetryAfter != 2*time.Second || e[0].RetryIn != 2*time.Second {
			t.Errorf("attempt 1: got status %d RetryAfter %v RetryIn %v, want 503 2s 2s", e[0].Status, e[0].RetryAfter, e[0].RetryIn)
		}
		var se *outlast.StatusError
		if !errors.As(e[0].Err, &se) || se.StatusCode != 503 {
			t.Errorf("attempt 1: got Err %v, want a *StatusError 503", e[0].Err)
		}
		if !errors.Is(e[1].Err, errRefused) || e[1].Status != 0 {
			t.Errorf("attempt 2: got %v status %d, want the refused error", e[1].Err, e[1].Status)
		}
		if e[2].Err != nil || e[2].Status != 200 || e[2].RetryIn != 0 {
			t.Errorf("attempt 3: got %v %d %v, want success with no RetryIn", e[2].Err, e[2].Status, e[2].RetryIn)
		}
		for i := 1; i < len(e); i++ {
			if e[i].CallID <= e[i-1].CallID {
				t.Errorf("call IDs not increasing: %s then %s", e[i-1].CallID, e[i].CallID)
			}
			if rec.starts[i].CallID != e[i].CallID {
				t.Errorf("attempt %d: start and end call IDs differ", i+1)
			}
		}
	})
}

// Each retry is logged at warn as it is sent, with the status it
// retries, its number and how long it waited, and without the URL's
// secrets.
func TestTransportLogsEachRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: dropTime}))
		fake := newFake(step{status: 503}, step{err: &urlErr}, step{})
		tr := &outlast.Transport{Base: fake, Policy: &outlast.Policy{Waits: ms(1500, 1500)}, Logger: logger}
		req, _ := http.NewRequest(http.MethodGet, "http://model.test/v1?key=sk-secret", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		want := []string{
			`level=WARN msg="outlast: retrying" attempt=2 status=503 waited=1.5s error="outlast: status 503 Service Unavailable"`,
			`level=WARN msg="outlast: retrying" attempt=3 status=0 waited=1.5s error="Get \"http://model.test/v1\": dial tcp 127.0.0.1:1: connect: connection refused"`,
		}
		if len(lines) != len(want) {
			t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), buf.String())
		}
		for i := range want {
			if lines[i] != want[i] {
				t.Errorf("line %d:\ngot  %s\nwant %s", i+1, lines[i], want[i])
			}
		}
		if strings.Contains(buf.String(), "sk-secret") {
			t.Error("the log holds the URL's secret")
		}
	})
}

// A retry's line tells the whole of its wait: under an Admission, which
// spaces an outage's retries itself, the policy's wait is nothing and the
// Admission's is all, and the line says so rather than 0s.
func TestTransportLogsAdmissionWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: dropTime}))
		fake := newFake(step{status: 503}, step{status: 502}, step{})
		var rec recorder
		tr := &outlast.Transport{Base: fake, Policy: patient(), Admission: &outlast.Admission{}, Hooks: rec.hooks(), Logger: logger}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if _, _, err := get(t, ctx, tr); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != 2 || len(rec.starts) != 3 {
			t.Fatalf("got %d lines and %d attempts, want 2 and 3:\n%s", len(lines), len(rec.starts), buf.String())
		}
		for i, line := range lines {
			waited := rec.starts[i+1].Start.Sub(rec.ends[i].End)
			if waited <= 0 {
				t.Fatalf("attempt %d was sent %v after the failure; want a wait", i+2, waited)
			}
			if want := fmt.Sprintf("attempt=%d status=%d waited=%v ", i+2, rec.ends[i].Status, waited); !strings.Contains(line, want) {
				t.Errorf("line %d: got %s, want it to hold %q", i+1, line, want)
			}
		}
	})
}

// The library logs nothing unless given a Logger: not a Transport through
// an outage, with an Admission, and not Do.
func TestSilentByDefault(t *testing.T) {
	var buf bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(step{status: 503}, step{err: errRefused}, step{status: 429, header: map[string]string{"Retry-After": "3"}}, step{})
		tr := &outlast.Transport{Base: fake, Policy: patient(), Admission: &outlast.Admission{}, MaxRetryAfter: time.Second}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if _, _, err := get(t, ctx, tr); err != nil {
			t.Fatal(err)
		}
		n := 0
		err := outlast.Do(t.Context(), &outlast.Policy{Waits: ms(10, 10)}, func(context.Context) error {
			if n++; n < 3 {
				return &outlast.StatusError{StatusCode: 503}
			}
			return nil
		})
		if err != nil || n != 3 {
			t.Fatalf("Do: got %v after %d attempts, want success after 3", err, n)
		}
	})
	if buf.Len() > 0 {
		t.Errorf("the library logged, unasked:\n%s", buf.String())
	}
}

var urlErr = url.Error{Op: "Get", URL: "http://model.test/v1?key=sk-secret", Err: errRefused}

func dropTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// A policy in the context overrides the Transport's, and a nil one turns
// retries off for that request.
func TestTransportContextPolicy(t *testing.T) {
	cases := []struct {
		name     string
		ctx      func() context.Context
		tp       *outlast.Policy
		attempts int
	}{
		{"context adds a policy", func() context.Context {
			return outlast.WithPolicy(context.Background(), &outlast.Policy{Waits: ms(1, 1)})
		}, nil, 3},
		{"context replaces the policy", func() context.Context {
			return outlast.WithPolicy(context.Background(), &outlast.Policy{Waits: ms(1)})
		}, &outlast.Policy{Waits: ms(1, 1, 1)}, 2},
		{"context turns retries off", func() context.Context {
			return outlast.WithPolicy(context.Background(), nil)
		}, &outlast.Policy{Waits: ms(1, 1, 1)}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := newFake(step{status: 503})
				tr := &outlast.Transport{Base: fake, Policy: c.tp, Logger: discardLogger()}
				if _, _, err := get(t, c.ctx(), tr); err != nil {
					t.Fatal(err)
				}
				if n := len(fake.attempts()); n != c.attempts {
					t.Errorf("got %d attempts, want %d", n, c.attempts)
				}
			})
		})
	}
}

// The caller's cancellation during a wait ends the request at once, with
// an error that is both the cancellation and the last failure.
func TestTransportCancelDuringWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(step{status: 503})
		tr := &outlast.Transport{Base: fake, Policy: &outlast.Policy{Waits: []time.Duration{time.Minute}}, Logger: discardLogger()}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(10*time.Second, cancel)
		start := time.Now()
		_, _, err := get(t, ctx, tr)
		var se *outlast.StatusError
		if !errors.Is(err, context.Canceled) || !errors.As(err, &se) || se.StatusCode != 503 {
			t.Fatalf("got %v, want context.Canceled wrapping the 503", err)
		}
		if got := time.Since(start); got != 10*time.Second {
			t.Errorf("returned after %v, want 10s", got)
		}
		if n := len(fake.attempts()); n != 1 {
			t.Errorf("got %d attempts, want 1", n)
		}
	})
}

// fakeGate is a Gate that records when it is held.
type fakeGate struct {
	mu     sync.Mutex // guards all below
	held   int
	events []string
	busy   bool
	ahead  int
}

func (g *fakeGate) Acquire(ctx context.Context, key string, queued func(int)) (func(), error) {
	g.mu.Lock()
	if g.busy {
		g.mu.Unlock()
		return nil, outlast.ErrBusy
	}
	ahead := g.ahead
	g.mu.Unlock()
	if ahead > 0 {
		queued(ahead)
		time.Sleep(time.Second) // the wait at the gate, in virtual time
	}
	g.mu.Lock()
	g.held++
	g.events = append(g.events, "acquire "+key)
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			g.held--
			g.events = append(g.events, "release")
			g.mu.Unlock()
		})
	}, nil
}

func (g *fakeGate) state() (int, []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held, append([]string(nil), g.events...)
}

// The gate is held around each attempt, never during the waits, and for
// the returned response until its body is closed.
func TestTransportHoldsGatePerAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &fakeGate{ahead: 2}
		var rec recorder
		fake := newFake(step{status: 503}, step{body: "ok"})
		tr := &outlast.Transport{Base: fake, Gate: g, Policy: &outlast.Policy{Waits: ms(10)}, Hooks: rec.hooks(), Logger: discardLogger()}
		req, _ := http.NewRequest(http.MethodGet, "http://model.test/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if held, ev := g.state(); held != 1 || strings.Join(ev, ",") != "acquire model.test,release,acquire model.test" {
			t.Fatalf("before close: held %d, events %v; want the second attempt's hold only", held, ev)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if held, _ := g.state(); held != 0 {
			t.Errorf("after close: held %d, want 0", held)
		}
		if a := rec.ends[1]; a.Key != "model.test" || a.Ahead != 2 || a.GateWait != time.Second {
			t.Errorf("attempt 2: got key %q ahead %d wait %v, want model.test 2 1s", a.Key, a.Ahead, a.GateWait)
		}
		if len(rec.queued) != 2 || rec.queued[0] != 2 || rec.queued[1] != 2 {
			t.Errorf("got Queued hooks %v, want [2 2]", rec.queued)
		}
	})
}

// A busy gate is not retried, and nothing is sent.
func TestTransportBusyNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(step{})
		tr := &outlast.Transport{Base: fake, Gate: &fakeGate{busy: true}, Policy: &outlast.Policy{Waits: ms(1)}, Logger: discardLogger()}
		_, _, err := get(t, context.Background(), tr)
		if !errors.Is(err, outlast.ErrBusy) {
			t.Fatalf("got %v, want ErrBusy", err)
		}
		if n := len(fake.attempts()); n != 0 {
			t.Errorf("got %d attempts sent, want 0", n)
		}
	})
}

// A request refused at the gate is never sent, and its body is closed,
// as the RoundTripper contract asks.
func TestTransportBusyClosesBody(t *testing.T) {
	body := &trackedBody{Reader: strings.NewReader("{}")}
	tr := &outlast.Transport{Base: newFake(step{}), Gate: &fakeGate{busy: true}}
	req, _ := http.NewRequest(http.MethodPost, "http://model.test/", body)
	if _, err := tr.RoundTrip(req); !errors.Is(err, outlast.ErrBusy) {
		t.Fatalf("got %v, want ErrBusy", err)
	}
	if !body.closed {
		t.Error("the request body was not closed")
	}
}

type trackedBody struct {
	io.Reader
	closed bool
}

func (b *trackedBody) Close() error { b.closed = true; return nil }

// Do retries any function under the same rules, taking the server's delay
// from a *StatusError, and an inner Do under an outer one tries once.
func TestDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder
		ctx := outlast.WithHooks(context.Background(), rec.hooks())
		p := &outlast.Policy{Waits: ms(10, 10)}
		calls := 0
		start := time.Now()
		err := outlast.Do(ctx, p, func(ctx context.Context) error {
			return outlast.Do(ctx, p, func(context.Context) error {
				calls++
				if calls == 1 {
					return &outlast.StatusError{StatusCode: 429, RetryAfter: 3 * time.Second}
				}
				return errRefused
			})
		})
		if !errors.Is(err, errRefused) {
			t.Fatalf("got %v, want the last error", err)
		}
		if calls != 3 {
			t.Errorf("got %d calls, want 3 (the inner Do must not retry)", calls)
		}
		if got := time.Since(start); got != 3*time.Second+10*time.Millisecond {
			t.Errorf("took %v, want 3.01s", got)
		}
		// Each inner attempt is reported once by the inner Do and once by
		// the outer, and only the outer, which retries, carries RetryIn.
		want := []time.Duration{0, 3 * time.Second, 0, 10 * time.Millisecond, 0, 0}
		if got := rec.retryIns(); !equalDurations(got, want) {
			t.Errorf("got RetryIn %v, want %v", got, want)
		}
	})
}

// A request that succeeds at once costs at most 6 allocations beyond the
// base transport: the context mark and the request copy with its header.
func TestTransportSuccessAllocations(t *testing.T) {
	// A base that allocates nothing: what RoundTrip allocates is the
	// Transport's own.
	resp := &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}}
	base := roundTripFunc(func(*http.Request) (*http.Response, error) { return resp, nil })
	tr := &outlast.Transport{Base: base, Policy: &outlast.Policy{Waits: ms(1)}}
	// An SDK sends a dozen headers, and a header map copied past eight
	// keys allocates more: the bound holds for any number.
	for _, n := range []int{2, 7, 8, 12, 30} {
		req, _ := http.NewRequest(http.MethodPost, "http://model.test/v1/chat/completions", nil)
		for i := range n {
			req.Header.Set(fmt.Sprintf("X-Header-%d", i), "v")
		}
		got := testing.AllocsPerRun(100, func() {
			if _, err := tr.RoundTrip(req); err != nil {
				t.Fatal(err)
			}
		})
		if got > 6 {
			t.Errorf("%d headers: got %v allocations per request, want at most 6", n, got)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, "http://model.test/v1/chat/completions", nil)
	none := &outlast.Transport{Base: base}
	if got := testing.AllocsPerRun(100, func() { none.RoundTrip(req) }); got != 0 {
		t.Errorf("without a policy: got %v allocations, want 0", got)
	}
	// A timeout adds 5: the attempt's cancelable context and its cancel
	// func, the timer and its func, and the body that ends them. The
	// request is still copied once, for the mark and the timeout both.
	timed := &outlast.Transport{Base: base, Policy: tr.Policy, ResponseHeaderTimeout: time.Minute}
	for _, n := range []int{2, 12} {
		req, _ := http.NewRequest(http.MethodPost, "http://model.test/v1/chat/completions", nil)
		for i := range n {
			req.Header.Set(fmt.Sprintf("X-Header-%d", i), "v")
		}
		got := testing.AllocsPerRun(100, func() {
			resp, err := timed.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		})
		if got > 6+5 {
			t.Errorf("%d headers, with a timeout: got %v allocations per request, want at most 11", n, got)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A 200 stream that sends an error before its answer begins failed
// before anything of the answer reached the caller: it is retried as the
// status its error type stands for, and when it is not retryable the
// caller gets the stream intact.
func TestTransportFirstEventError(t *testing.T) {
	sse := map[string]string{"Content-Type": "text/event-stream"}
	overloaded := "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
	openaiErr := "data: {\"error\":{\"type\":\"server_error\",\"message\":\"try again\"}}\n\n"
	invalid := "event: error\r\ndata: {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\"}}\r\n\r\n"
	messageStart := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"content\":[]}}\n\n"
	responseCreated := "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"error\":null}}\n\n"
	roleOnly := "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
	cases := []struct {
		name       string
		first      string
		wantStatus int // recorded on the first attempt
		attempts   int
		wantBody   string
	}{
		// Anthropic's overloaded_error as the first event: a 529.
		{"anthropic overloaded", overloaded, 529, 2, "data: ok\n\n"},
		// OpenAI's error object in the first data line: a 500.
		{"openai server_error", openaiErr, 500, 2, "data: ok\n\n"},
		// A request error is not retried; the caller reads it as sent,
		// with CRLF line ends kept.
		{"invalid request", invalid, 400, 1, invalid},
		// A keep-alive comment dispatches no event (WHATWG), so the peek
		// reads past it to the error event, which is the first.
		{"comment then overloaded", ": ping\n\n" + overloaded, 529, 2, "data: ok\n\n"},
		// Lines may end at a lone CR (WHATWG): still an error event.
		{"overloaded with CR endings", strings.ReplaceAll(overloaded, "\n", "\r"), 529, 2, "data: ok\n\n"},
		// An event that carries the answer commits it.
		{"ordinary", "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n", 200, 1, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n"},
		// The events before the answer carry none of it: an error after
		// them fails the attempt, and the caller reads the next one's
		// stream alone, its own preamble once. Anthropic's overload after
		// message_start, as it sends it under load:
		{"anthropic overloaded after message_start", messageStart + overloaded, 529, 2, "data: ok\n\n"},
		// the Responses API's error after response.created:
		{"responses error after created", responseCreated + "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"x\",\"param\":null,\"sequence_number\":1}\n\n", 500, 2, "data: ok\n\n"},
		// and an OpenAI chat stream's error chunk after its role chunk.
		{"openai error after the role chunk", roleOnly + openaiErr, 500, 2, "data: ok\n\n"},
		// A stream that ends with its preamble alone closed early.
		{"the preamble, then the end", messageStart, 0, 2, "data: ok\n\n"},
		// A whole body under the stream's label, with no line of an
		// event stream: the caller gets it as it came, not a retry.
		{"a JSON answer labelled a stream", `{"id":"chatcmpl-1","object":"chat.completion","choices":[]}`, 200, 1, `{"id":"chatcmpl-1","object":"chat.completion","choices":[]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := newFake(step{body: c.first, header: sse}, step{body: "data: ok\n\n", header: sse})
				var rec recorder
				tr := &outlast.Transport{Base: fake, Policy: &outlast.Policy{Waits: ms(10)}, FirstByteTimeout: time.Second, Hooks: rec.hooks(), Logger: discardLogger()}
				code, body, err := get(t, context.Background(), tr)
				if err != nil || code != 200 || body != c.wantBody {
					t.Fatalf("got %d %q %v, want 200 %q", code, body, err, c.wantBody)
				}
				if n := len(fake.attempts()); n != c.attempts {
					t.Errorf("got %d attempts, want %d", n, c.attempts)
				}
				if got := rec.ends[0].Status; got != c.wantStatus {
					t.Errorf("first attempt recorded status %d, want %d", got, c.wantStatus)
				}
				if c.wantStatus >= 400 && !errors.Is(rec.ends[0].Err, outlast.ErrErrorEvent) {
					t.Errorf("first attempt's error %v, want ErrErrorEvent", rec.ends[0].Err)
				}
			})
		})
	}
}

// A retrying Transport over one that peeks (the gateway's shape, or a
// user's stack) judges a stream that opened with an error event as the
// inner one did: a failure to retry, never an answer to commit.
func TestTransportStackedErrorEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sse := map[string]string{"Content-Type": "text/event-stream"}
		overloaded := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\"}}\n\n" +
			"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
		fake := newFake(step{body: overloaded, header: sse}, step{body: "data: ok\n\n", header: sse})
		inner := &outlast.Transport{Base: fake, FirstByteTimeout: time.Second}
		outer := &outlast.Transport{Base: inner, Policy: &outlast.Policy{Waits: ms(10)}, Logger: discardLogger()}
		code, body, err := get(t, context.Background(), outer)
		if err != nil || code != 200 || body != "data: ok\n\n" || len(fake.attempts()) != 2 {
			t.Errorf("got %d %q %v after %d attempts; want the second attempt's stream", code, body, err, len(fake.attempts()))
		}
	})
}

// A stream that opened with an error event has its server's delay read
// as a failed status's is: cut to MaxRetryAfter, and recorded so.
func TestTransportErrorEventRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sse := map[string]string{"Content-Type": "text/event-stream", "Retry-After": "3600"}
		overloaded := "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
		fake := newFake(step{body: overloaded, header: sse}, step{body: "data: ok\n\n", header: map[string]string{"Content-Type": "text/event-stream"}})
		var rec recorder
		tr := &outlast.Transport{Base: fake, Policy: &outlast.Policy{Waits: ms(10)}, FirstByteTimeout: time.Second, MaxRetryAfter: 2 * time.Second, Hooks: rec.hooks(), Logger: discardLogger()}
		start := time.Now()
		if code, _, err := get(t, context.Background(), tr); err != nil || code != 200 {
			t.Fatalf("got %d %v, want the retry's 200", code, err)
		}
		if took, a := time.Since(start), rec.ends[0]; took > 3*time.Second || a.RetryAfter != 2*time.Second || !a.RetryAfterCut || a.RetryIn != 2*time.Second {
			t.Errorf("answered after %v; the first attempt's RetryAfter %v, cut %v, RetryIn %v; want the hour cut to 2 s, and recorded so", took, a.RetryAfter, a.RetryAfterCut, a.RetryIn)
		}
	})
}

// TestTransportFirstReadWhole checks that the byte the Transport reads
// ahead of a body (for FirstByteTimeout) comes with what follows it in
// the caller's first read, as it would without the read ahead, while a
// stream's first event comes at once, without a wait for what follows.
func TestTransportFirstReadWhole(t *testing.T) {
	for _, c := range []struct {
		name, ctype, body string
	}{
		{"json", "application/json", `{"id":"chatcmpl-1","choices":[]}`},
		{"stream", "text/event-stream", "data: 1\n\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := &pausingBody{first: c.body, closed: make(chan struct{})}
			tr := &outlast.Transport{
				Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
					return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {c.ctype}}, Body: body, Request: r}, nil
				}),
				Policy:           &outlast.Policy{Waits: ms(10)},
				FirstByteTimeout: time.Minute,
				Logger:           discardLogger(),
			}
			req, _ := http.NewRequest(http.MethodPost, "http://upstream.test/v1/chat/completions", nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan string, 1)
			go func() {
				buf := make([]byte, 1024)
				n, _ := resp.Body.Read(buf)
				got <- string(buf[:n])
			}()
			select {
			case g := <-got:
				if g != c.body {
					t.Errorf("the first read got %q; want %q", g, c.body)
				}
			case <-time.After(10 * time.Second):
				t.Error("the first read waited for more than what had come")
			}
			resp.Body.Close()
		})
	}
}

// pausingBody gives the first byte of first, then the rest of it, then
// nothing until it is closed, as a connection whose peer pauses.
type pausingBody struct {
	first  string
	began  bool
	closed chan struct{}
	once   sync.Once
}

func (b *pausingBody) Read(p []byte) (int, error) {
	if b.first != "" {
		n := copy(p, b.first)
		if !b.began {
			n = copy(p[:1], b.first)
			b.began = true
		}
		b.first = b.first[n:]
		return n, nil
	}
	<-b.closed
	return 0, io.EOF
}

func (b *pausingBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}

// TestTransportOwnedHeaders checks the header maps each attempt is sent
// with. A caller's map is never changed: each attempt gets a copy. A
// request whose context says its map is its own (the gateway's) has its
// first attempt marked in that map, and a retry still gets a copy, so
// that the first attempt's map, which may still be being written, is
// not changed after it was sent.
func TestTransportOwnedHeaders(t *testing.T) {
	for _, own := range []bool{false, true} {
		var sent []http.Header
		var firstAtRetry string
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			sent = append(sent, r.Header)
			if len(sent) == 1 {
				return &http.Response{StatusCode: 503, Body: http.NoBody, Header: http.Header{}}, nil
			}
			firstAtRetry = sent[0].Get(outlast.AttemptHeader)
			return &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}}, nil
		})
		tr := &outlast.Transport{Base: base, Policy: &outlast.Policy{Waits: []time.Duration{0}}}
		ctx := context.Background()
		if own {
			ctx = owned.Mark(ctx, true)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://model.test/v1/models", nil)
		req.Header.Set("X-Caller", "v")
		if _, err := tr.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
		if len(sent) != 2 {
			t.Fatalf("own %v: %d attempts, want 2", own, len(sent))
		}
		same := func(a, b http.Header) bool {
			return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
		}
		if got := same(sent[0], req.Header); got != own {
			t.Errorf("own %v: the first attempt was sent with the request's own map: %v", own, got)
		}
		if same(sent[1], req.Header) || same(sent[1], sent[0]) {
			t.Errorf("own %v: the retry was sent with the map of the request or of the first attempt; want a copy", own)
		}
		if firstAtRetry != "1" || sent[1].Get(outlast.AttemptHeader) != "2" || sent[1].Get("X-Caller") != "v" {
			t.Errorf("own %v: attempt headers %q then %q, X-Caller %q; want 1, 2 and the caller's", own, firstAtRetry, sent[1].Get(outlast.AttemptHeader), sent[1].Get("X-Caller"))
		}
		if !own && req.Header.Get(outlast.AttemptHeader) != "" {
			t.Errorf("the caller's header was changed: %v", req.Header)
		}
	}
}

// markHooks hears of attempts as the gateway's exchange does: through
// its methods, as what marked the context.
type markHooks struct{ got []string }

func (m *markHooks) AttemptStart(a outlast.Attempt) {
	m.got = append(m.got, fmt.Sprintf("start %d", a.N))
}
func (m *markHooks) AttemptEnd(a outlast.Attempt) {
	m.got = append(m.got, fmt.Sprintf("end %d %d", a.N, a.Status))
}
func (m *markHooks) Queued(key string, ahead int) {
	m.got = append(m.got, fmt.Sprintf("queued %d", ahead))
}

// A context marked with hooks as methods, as the gateway marks its own,
// reports each attempt to them after the Transport's own Hooks; Hooks
// that WithHooks gave nearer the request take their place.
func TestTransportMarkHooks(t *testing.T) {
	for _, with := range []bool{false, true} {
		n := 0
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			n++
			status := 200
			if n == 1 {
				status = 503
			}
			return &http.Response{StatusCode: status, Body: http.NoBody, Header: http.Header{}}, nil
		})
		var order []string
		m := &markHooks{}
		tr := &outlast.Transport{Base: base, Policy: &outlast.Policy{Waits: []time.Duration{0}},
			Hooks: outlast.Hooks{AttemptStart: func(outlast.Attempt) {
				order = append(order, fmt.Sprintf("transport, then %d of the mark's", len(m.got)))
			}}}
		ctx := owned.Mark(context.Background(), m)
		var withGot []string
		if with {
			ctx = outlast.WithHooks(ctx, outlast.Hooks{AttemptEnd: func(a outlast.Attempt) { withGot = append(withGot, fmt.Sprint(a.N)) }})
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://model.test/v1/models", nil)
		if _, err := tr.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
		switch {
		case with:
			if len(m.got) != 0 || fmt.Sprint(withGot) != "[1 2]" {
				t.Errorf("with WithHooks: the mark's methods heard %q and WithHooks' %q; want nothing and [1 2]", m.got, withGot)
			}
		default:
			if want := "[start 1 end 1 503 start 2 end 2 200]"; fmt.Sprint(m.got) != want {
				t.Errorf("the mark's methods heard %q, want %s", m.got, want)
			}
			if want := "[transport, then 0 of the mark's transport, then 2 of the mark's]"; fmt.Sprint(order) != want {
				t.Errorf("order %q, want %s", order, want)
			}
		}
	}
}

// Gemini's 429 carries its wait in the body, as google.rpc.RetryInfo's
// retryDelay, and no Retry-After: it is honoured as one, within
// MaxRetryAfter, and the caller that gets the 429 reads its body whole.
func TestTransportGeminiRetryDelay(t *testing.T) {
	body := `{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"3s"}]}}`
	gemini := step{status: 429, header: map[string]string{"Content-Type": "application/json; charset=UTF-8"}, body: body}
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(gemini, step{})
		tr := &outlast.Transport{Base: fake, Policy: &outlast.Policy{Waits: ms(100)}, Logger: discardLogger()}
		if code, _, err := get(t, context.Background(), tr); err != nil || code != 200 {
			t.Fatalf("got %d %v, want 200", code, err)
		}
		if at := fake.attempts(); len(at) != 2 || at[1].at.Sub(at[0].at) < 3*time.Second {
			t.Errorf("attempts at %v, want the retry at least 3 s after the 429", at)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(gemini)
		tr := &outlast.Transport{Base: fake, Policy: &outlast.Policy{Waits: ms(100), MaxAttempts: 2}, MaxRetryAfter: time.Second, Logger: discardLogger()}
		start := time.Now()
		code, got, err := get(t, context.Background(), tr)
		if err != nil || code != 429 || got != body {
			t.Fatalf("got %d %q %v, want the 429 with its body whole", code, got, err)
		}
		if took := time.Since(start); took != time.Second {
			t.Errorf("waited %v, want the delay cut to MaxRetryAfter, 1s", took)
		}
	})
}

// A failure whose body stalls after its headers (a 503 whose JSON never
// comes, read for its RetryInfo, or drained before the retry) holds the
// request at most failureRead, 5 s, not to its deadline: the retry comes.
func TestTransportFailureBodyStalls(t *testing.T) {
	for _, h := range []map[string]string{
		{"Content-Type": "application/json"},                     // read for RetryInfo
		{"Content-Type": "application/json", "Retry-After": "1"}, // drained before the retry
	} {
		t.Run(h["Retry-After"], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := newFake(step{status: 503, header: h, stall: true}, step{body: "ok"})
				tr := &outlast.Transport{Base: fake, Policy: &outlast.Policy{Waits: []time.Duration{time.Second}, Reserve: -1}, Logger: discardLogger()}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				start := time.Now()
				code, body, err := get(t, ctx, tr)
				if took := time.Since(start); err != nil || code != 200 || body != "ok" || took > 10*time.Second {
					t.Errorf("got %d %q %v after %v; want the retry's answer within 10 s", code, body, err, took)
				}
			})
		})
	}
}

// A hook that panics, which net/http's server recovers for a handler,
// gives back what the attempt held: the gate's slot is free for the next
// request, after a panic at the attempt's start, at a success's end, and
// at a failure's end before its retry.
func TestTransportHookPanicFreesSlot(t *testing.T) {
	for _, c := range []struct {
		name  string
		hooks outlast.Hooks
		first step
	}{
		{"start", outlast.Hooks{AttemptStart: func(outlast.Attempt) { panic("a hook's bug") }}, step{body: "ok"}},
		{"end", outlast.Hooks{AttemptEnd: func(outlast.Attempt) { panic("a hook's bug") }}, step{body: "ok"}},
		{"end before a retry", outlast.Hooks{AttemptEnd: func(outlast.Attempt) { panic("a hook's bug") }}, step{status: 503}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := gate.New(1, 0)
				fake := newFake(c.first, step{body: "ok"})
				tr := &outlast.Transport{Base: fake, Gate: g, Hooks: c.hooks, Policy: &outlast.Policy{Waits: ms(10)}}
				func() {
					defer func() { recover() }()
					req, _ := http.NewRequest(http.MethodGet, "http://model.test/", nil)
					tr.RoundTrip(req)
				}()
				tr.Hooks = outlast.Hooks{}
				code, _, err := get(t, context.Background(), tr)
				if held, _ := g.Load("model.test"); err != nil || code != 200 || held != 0 {
					t.Errorf("after the hook's panic: got %d, %v, %d slots held; want 200 and none held", code, err, held)
				}
			})
		})
	}
}
