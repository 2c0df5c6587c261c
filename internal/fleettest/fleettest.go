// Package fleettest holds the rules of an outlast.Fleet as one suite of
// tests, run over every implementation: the Fleet in memory of the root
// package's tests, and redisgate.Fleet through Redis. The rules run in
// real time, with short waits, since a Fleet over a network cannot run in
// a testing/synctest bubble; they wait on events and bound what they wait
// for generously.
package fleettest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
)

// NewFleet starts one fleet for a test and returns the func that joins an
// Admission to it, as a process of its own would.
type NewFleet func(t *testing.T, maxLimit int) (join func(a *outlast.Admission))

// Run runs the rules over the implementation that newFleet makes.
func Run(t *testing.T, newFleet NewFleet) {
	t.Run("OneProbeAndOneLimit", func(t *testing.T) { oneProbeAndOneLimit(t, newFleet) })
	t.Run("SharedNotBefore", func(t *testing.T) { sharedNotBefore(t, newFleet) })
	t.Run("NoReserveLeft", func(t *testing.T) { noReserveLeft(t, newFleet) })
}

// members returns n Admissions joined to one new fleet.
func members(t *testing.T, newFleet NewFleet, n, maxLimit int, probeWait time.Duration) []*outlast.Admission {
	join := newFleet(t, maxLimit)
	out := make([]*outlast.Admission, n)
	for i := range out {
		// Every server's delay holds the key, however short, so that a
		// test of a shared not-before time need not wait out a long one.
		out[i] = &outlast.Admission{MaxLimit: maxLimit, ProbeWaits: []time.Duration{probeWait}, ShortDelay: -1}
		join(out[i])
	}
	return out
}

// upstream refuses every attempt until up, or answers 503 with header
// while it is set, then 200 after service; it counts what it sees.
type upstream struct {
	mu       sync.Mutex
	up       time.Time
	header   http.Header // while down: a 503 with these headers; nil refuses
	service  time.Duration
	inFlight int
	peak     int // the most in flight at once once up
	downPeak int // the most in flight at once while down
	down     int // attempts while down
	sent     []time.Time
}

func (u *upstream) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		r.Body.Close()
	}
	u.mu.Lock()
	now := time.Now()
	u.sent = append(u.sent, now)
	u.inFlight++
	isDown := now.Before(u.up)
	if isDown {
		u.down++
		u.downPeak = max(u.downPeak, u.inFlight)
	} else {
		u.peak = max(u.peak, u.inFlight)
	}
	header := u.header
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.inFlight--
		u.mu.Unlock()
	}()
	if isDown {
		time.Sleep(5 * time.Millisecond) // so that overlaps can show
		if header == nil {
			return nil, syscall.ECONNREFUSED
		}
		return &http.Response{StatusCode: 503, Header: header.Clone(), Body: http.NoBody, Request: r}, nil
	}
	select {
	case <-time.After(u.service):
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
}

// send sends one request through a, under policy and a 20 s deadline.
func send(u *upstream, a *outlast.Admission, policy *outlast.Policy) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://model.test/v1/chat/completions", nil)
	resp, err := (&outlast.Transport{Base: u, Admission: a, Policy: policy}).RoundTrip(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// markDown marks a's key down with three refused requests, with no
// policy.
func markDown(t *testing.T, u *upstream, a *outlast.Admission) {
	t.Helper()
	for range 3 {
		req, _ := http.NewRequest(http.MethodPost, "http://model.test/", nil)
		if _, err := (&outlast.Transport{Base: u, Admission: a}).RoundTrip(req); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("marking request: %v, want refused", err)
		}
	}
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A key that one process marks down is down for all of them; while it is,
// one probe at a time goes out for the whole fleet; and while it
// recovers, the fleet's requests in flight stay within one MaxLimit.
func oneProbeAndOneLimit(t *testing.T, newFleet NewFleet) {
	u := &upstream{up: time.Now().Add(2 * time.Second), service: 100 * time.Millisecond}
	ms := members(t, newFleet, 3, 3, 100*time.Millisecond)
	markDown(t, u, ms[0])
	waitFor(t, 5*time.Second, "every process to learn that the key is down", func() bool {
		for _, a := range ms {
			if a.State("model.test").State == outlast.Healthy {
				return false
			}
		}
		return true
	})
	u.mu.Lock()
	marked := u.down
	u.mu.Unlock()
	policy := &outlast.Policy{Waits: []time.Duration{50 * time.Millisecond}, Reserve: 100 * time.Millisecond}
	var wg sync.WaitGroup
	errs := make(chan error, 60)
	for i := range 60 {
		wg.Go(func() {
			if err := send(u, ms[i%3], policy); err != nil {
				errs <- fmt.Errorf("request %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.downPeak > 1 {
		t.Errorf("%d attempts in flight at once while down, want 1: the fleet's one probe", u.downPeak)
	}
	// Probes every 100-150 ms for under 2 s for the fleet: about 15,
	// where three processes alone would send three times that.
	if probes := u.down - marked; probes > 25 {
		t.Errorf("%d probes while down, want at most 25 for the fleet", probes)
	}
	if u.peak > 3 {
		t.Errorf("peak in flight %d after the outage, want at most the fleet's MaxLimit 3", u.peak)
	}
	for i, a := range ms {
		waitFor(t, 5*time.Second, "process "+strconv.Itoa(i)+" to be healthy after the backlog", func() bool { return a.State("model.test").State == outlast.Healthy })
	}
}

// A not-before time that one process learns from a server holds for all:
// another process's request waits for it, though it never saw the
// server's delay itself.
func sharedNotBefore(t *testing.T, newFleet NewFleet) {
	start := time.Now()
	u := &upstream{up: start.Add(50 * time.Millisecond), header: http.Header{"Retry-After": {"1"}}}
	ms := members(t, newFleet, 2, 3, 100*time.Millisecond)
	req, _ := http.NewRequest(http.MethodPost, "http://model.test/", nil)
	if resp, err := (&outlast.Transport{Base: u, Admission: ms[0]}).RoundTrip(req); err != nil || resp.StatusCode != 503 {
		t.Fatalf("the first request: %v, want a 503", err)
	}
	waitFor(t, 5*time.Second, "the other process to learn the not-before time", func() bool {
		return !ms[1].State("model.test").NotBefore.IsZero()
	})
	if err := send(u, ms[1], nil); err != nil {
		t.Fatal(err)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.sent) != 2 {
		t.Fatalf("%d attempts, want 2", len(u.sent))
	}
	if d := u.sent[1].Sub(start); d < time.Second {
		t.Errorf("the other process's request went after %v, want at the not-before time, 1 s, or later", d)
	}
}

// A request with less time to its deadline than its policy's reserve,
// which cannot wait, still goes while the key recovers when a place under
// the fleet's limit is free, as it would without a Fleet: the reserve is
// for a wait, not for taking a free place.
func noReserveLeft(t *testing.T, newFleet NewFleet) {
	u := &upstream{up: time.Now().Add(200 * time.Millisecond), service: 50 * time.Millisecond}
	ms := members(t, newFleet, 2, 4, 100*time.Millisecond)
	markDown(t, u, ms[0])
	waitFor(t, 5*time.Second, "the other process to learn that the key is down", func() bool {
		return ms[1].State("model.test").State == outlast.Down
	})
	// The probe, answered: the key recovers at 2, under MaxLimit 4.
	if err := send(u, ms[0], &outlast.Policy{Waits: []time.Duration{50 * time.Millisecond}, Reserve: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the other process to learn that the key recovers", func() bool {
		return ms[1].State("model.test").State == outlast.Recovering
	})
	// 20 s to its deadline, with the default reserve of 60 s.
	if err := send(u, ms[1], &outlast.Policy{}); err != nil {
		t.Errorf("a request with no time for its reserve, a place free: %v, want it sent", err)
	}
}
