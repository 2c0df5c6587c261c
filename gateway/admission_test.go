package gateway_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/record"
)

// outage is an upstream in virtual time that answers 503 until up, then
// 200, each after a second; it counts the attempts it saw during the
// outage, and the most in flight at once.
type outage struct {
	up, settled time.Time // settled: the attempts in flight before it was marked down have ended

	mu         sync.Mutex
	during     int
	inFlight   int // of the attempts sent after settled
	peakDuring int
}

func (o *outage) RoundTrip(r *http.Request) (*http.Response, error) {
	o.mu.Lock()
	now := time.Now()
	down := now.Before(o.up)
	if down {
		o.during++
	}
	counted := down && now.After(o.settled)
	if counted {
		o.inFlight++
		o.peakDuring = max(o.peakDuring, o.inFlight)
	}
	o.mu.Unlock()
	defer func() {
		if counted {
			o.mu.Lock()
			o.inFlight--
			o.mu.Unlock()
		}
	}()
	select {
	case <-time.After(time.Second):
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	code := 200
	if down {
		code = 503
	}
	return &http.Response{StatusCode: code, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}, nil
}

// With an Admission, an outage costs the upstream one probe at a time,
// whatever the callers: those whose deadline fits wait and get through,
// and those whose deadline does not get 503 upstream-down at once, which
// tells the SDK not to retry and /outlast/health shows.
func TestGatewayAdmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 3 failures mark it down by 1.5 s; those sent before end by 2.5 s.
		var mu sync.Mutex
		var states []string
		o := &outage{up: time.Now().Add(30 * time.Second), settled: time.Now().Add(3 * time.Second)}
		u, _ := url.Parse("http://upstream.test")
		g, err := gateway.New(gateway.Config{
			Upstreams: []gateway.Upstream{{
				URL:       u,
				Policy:    &outlast.Policy{Waits: []time.Duration{2 * time.Second}, Reserve: 5 * time.Second},
				Admission: &outlast.Admission{},
			}},
			Transport: o,
			Logger:    slog.New(slog.DiscardHandler),
			Observer: record.Observer{UpstreamState: func(c record.StateChange) {
				mu.Lock()
				states = append(states, c.To.String())
				mu.Unlock()
			}},
		})
		if err != nil {
			t.Fatal(err)
		}
		codes := make([]int, 40)
		kinds := make([]string, 40)
		var wg sync.WaitGroup
		for i := range codes {
			timeout := "2m"
			if i%4 == 3 {
				timeout = "8s" // less 5 s reserve: no probe of a down upstream comes in time
			}
			wg.Go(func() {
				rec := serve(g, `{"model":"m"}`, map[string]string{"Outlast-Timeout": timeout})
				codes[i], kinds[i] = rec.Code, rec.Header().Get("Outlast-Error")
			})
			time.Sleep(250 * time.Millisecond) // arrivals over 10 s
		}
		time.Sleep(10 * time.Second) // 20 s into the outage
		var h gateway.Health
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/outlast/health", nil))
		if err := json.Unmarshal(rec.Body.Bytes(), &h); err != nil {
			t.Fatal(err)
		}
		if a := h.Upstreams[0].Admission; a == nil || (a.State != "down" && a.State != "probing") || a.Waiting == 0 {
			t.Errorf("health during the outage: %+v, want the upstream down or probing with requests waiting", a)
		}
		wg.Wait()
		// A short request that came to the front of the queue was a
		// probe: it gets the upstream's own 503 when its deadline leaves
		// no retry. The others are sent away at once.
		sentAway := 0
		for i := range codes {
			switch {
			case i%4 == 3 && i >= 4 && codes[i] != 503:
				t.Errorf("request %d (8 s deadline, upstream down): %d %q, want 503", i, codes[i], kinds[i])
			case i%4 == 3 && kinds[i] == "upstream-down":
				sentAway++
			case i%4 != 3 && codes[i] != 200:
				t.Errorf("request %d (2 min deadline): %d %q, want 200 once the upstream is back", i, codes[i], kinds[i])
			}
		}
		if sentAway < 6 {
			t.Errorf("%d of the 9 short requests after the first got 503 upstream-down, want at least 6: those that did not probe", sentAway)
		}
		mu.Lock()
		if len(states) < 4 || states[0] != "down" || states[1] != "probing" || states[len(states)-2] != "recovering" || states[len(states)-1] != "healthy" {
			t.Errorf("the observer saw the states %v, want down, probing, … recovering, healthy", states)
		}
		mu.Unlock()
		if o.peakDuring != 1 {
			t.Errorf("the upstream saw %d attempts at once during the outage once it was marked down, want 1", o.peakDuring)
		}
		// The first requests mark it down (3 failures, from requests
		// already in flight), then probes at 1, 2 and every 4 s.
		if o.during > 16 {
			t.Errorf("the upstream saw %d attempts during the 30 s outage, want at most 16: 40 callers' own retries every 2 s would make hundreds", o.during)
		}
	})
}

// delayed is an upstream in virtual time that answers its first request
// at once with 503 and Retry-After: 20, and every later one with 200
// after a second.
type delayed struct{ n atomic.Int32 }

func (d *delayed) RoundTrip(r *http.Request) (*http.Response, error) {
	h := http.Header{"Content-Type": {"application/json"}}
	code := 200
	if d.n.Add(1) == 1 {
		code = 503
		h.Set("Retry-After", "20")
	} else {
		select {
		case <-time.After(time.Second):
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	return &http.Response{StatusCode: code, Header: h, Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}, nil
}

// /outlast/health shows the limit in force: MaxLimit while healthy, one
// probe and a server's not-before time while the upstream is down, and
// once it recovers a quarter of MaxLimit at first.
func TestGatewayHealthAdmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u, _ := url.Parse("http://upstream.test")
		g, err := gateway.New(gateway.Config{
			Upstreams: []gateway.Upstream{{
				URL:       u,
				Policy:    &outlast.Policy{Waits: []time.Duration{2 * time.Second}, Reserve: time.Second},
				Admission: &outlast.Admission{MaxLimit: 8},
			}},
			Transport: &delayed{},
			Logger:    slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		health := func() *gateway.AdmissionHealth {
			t.Helper()
			var h gateway.Health
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/outlast/health", nil))
			if err := json.Unmarshal(rec.Body.Bytes(), &h); err != nil {
				t.Fatal(err)
			}
			return h.Upstreams[0].Admission
		}
		if a := health(); a == nil || a.State != "healthy" || a.Limit != 8 || a.MaxLimit != 8 {
			t.Fatalf("health at first: %+v, want healthy at its limit of 8", a)
		}
		start := time.Now()
		if rec := serve(g, `{"model":"m"}`, map[string]string{"Outlast-Timeout": "5s"}); rec.Code != 503 {
			t.Fatalf("the first request: %d, want the upstream's 503, whose 20 s delay is past its deadline", rec.Code)
		}
		a := health()
		if a == nil || a.State != "down" || a.Limit != 1 || a.NotBefore == nil || a.NotBefore.Before(start.Add(20*time.Second)) || a.NotBefore.After(start.Add(22*time.Second)) {
			t.Fatalf("health after the 503: %+v, want down, at a limit of one probe, with a not-before time 20 s to 22 s away", a)
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() { serve(g, `{"model":"m"}`, map[string]string{"Outlast-Timeout": "2m"}) })
		}
		// The probe goes at the not-before time and is answered 1 s later.
		time.Sleep(time.Until(a.NotBefore.Add(1500 * time.Millisecond)))
		if r := health(); r == nil || r.State != "recovering" || r.Limit != 2 || r.NotBefore != nil {
			t.Errorf("health once the probe is answered: %+v, want recovering at a limit of 2 (a quarter of 8), the not-before time gone", r)
		}
		wg.Wait()
	})
}
