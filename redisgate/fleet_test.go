package redisgate_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gate"
	"github.com/outlast-llm/outlast/redisgate"
)

// fleetUpstream refuses every attempt until up, then answers 200 after
// service; it counts attempts in flight, while down and after.
type fleetUpstream struct {
	mu       sync.Mutex
	up       time.Time
	service  time.Duration
	inFlight int
	peak     int // the most in flight at once after up
	downPeak int // the most in flight at once while down
	down     int // attempts while down
}

func (u *fleetUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		r.Body.Close()
	}
	u.mu.Lock()
	u.inFlight++
	isDown := time.Now().Before(u.up)
	if isDown {
		u.down++
		u.downPeak = max(u.downPeak, u.inFlight)
	} else {
		u.peak = max(u.peak, u.inFlight)
	}
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.inFlight--
		u.mu.Unlock()
	}()
	if isDown {
		time.Sleep(5 * time.Millisecond) // a refusal takes a little time, so that overlaps can show
		return nil, syscall.ECONNREFUSED
	}
	select {
	case <-time.After(u.service):
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
}

func (u *fleetUpstream) counts() (down, downPeak, peak int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.down, u.downPeak, u.peak
}

// Three processes (three clients and Fleets on one Redis and Prefix)
// act as one Admission: a key that one marks down is down for all, one
// probe at a time goes out for the whole fleet, and while the key
// recovers the fleet's requests in flight stay within one MaxLimit.
func TestFleetThroughRedis(t *testing.T) {
	opts := redisOptions(t)
	prefix := testPrefix()
	u := &fleetUpstream{up: time.Now().Add(2 * time.Second), service: 100 * time.Millisecond}
	var members []*outlast.Admission
	for range 3 {
		client := newClient(t, opts)
		a := &outlast.Admission{MaxLimit: 3, ProbeWaits: []time.Duration{100 * time.Millisecond}}
		f := redisgate.NewFleet(client, redisgate.FleetOptions{Prefix: prefix, MaxLimit: 3, Lease: time.Second})
		f.Join(a)
		t.Cleanup(func() { f.Close() })
		members = append(members, a)
	}
	policy := &outlast.Policy{Waits: []time.Duration{50 * time.Millisecond}, Reserve: 100 * time.Millisecond}
	send := func(a *outlast.Admission) error {
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
	// The first process alone marks the key down: three refusals.
	for range 3 {
		req, _ := http.NewRequest(http.MethodPost, "http://model.test/", nil)
		if _, err := (&outlast.Transport{Base: u, Admission: members[0]}).RoundTrip(req); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("marking request: %v, want refused", err)
		}
	}
	waitFor(t, 5*time.Second, "every process to learn that the key is down", func() bool {
		for _, a := range members {
			if a.State("model.test").State == outlast.Healthy {
				return false
			}
		}
		return true
	})
	marked, _, _ := u.counts()
	var wg sync.WaitGroup
	errs := make(chan error, 60)
	for i := range 60 {
		wg.Go(func() {
			if err := send(members[i%3]); err != nil {
				errs <- fmt.Errorf("request %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	down, downPeak, peak := u.counts()
	if downPeak > 1 {
		t.Errorf("%d attempts in flight at once while down, want 1: the fleet's one probe", downPeak)
	}
	// Probes every 100-150 ms for under 2 s, for the fleet: at most
	// about 20, where three processes alone would send three times that.
	if probes := down - marked; probes > 25 {
		t.Errorf("%d probes while down, want at most 25 for the fleet", probes)
	}
	if peak > 3 {
		t.Errorf("peak in flight %d after the outage, want at most the fleet's MaxLimit 3", peak)
	}
	t.Logf("%d probes while down, down peak %d, peak %d", down-marked, downPeak, peak)
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A Fallback gate uses the shared gate while Redis answers, the local one
// from the first failure on, with no call to Redis per request while it is
// degraded, and the shared one again once Redis answers a ping.
func TestFallback(t *testing.T) {
	opts := redisOptions(t)
	hole := newBlackhole(t, opts.Addr)
	o := *opts
	o.Addr, o.ContextTimeoutEnabled, o.MaxRetries = hole.addr(), true, -1
	client := newClient(t, &o)
	var mu sync.Mutex
	var changes []bool
	mon := redisgate.NewMonitor(client, 50*time.Millisecond, 200*time.Millisecond, func(degraded bool, err error) {
		mu.Lock()
		changes = append(changes, degraded)
		mu.Unlock()
	})
	t.Cleanup(func() { mon.Close() })
	shared := newGate(t, client, redisgate.Options{Capacity: 1, MaxQueue: 4, Timeout: 200 * time.Millisecond})
	local := gate.New(1, 4)
	fb := &redisgate.Fallback{Shared: shared, Local: local, Monitor: mon}
	acquire := func() func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		release, err := fb.Acquire(ctx, "k", nil)
		if err != nil {
			t.Fatal(err)
		}
		return release
	}
	release := acquire()
	checkLoad(t, shared, "k", 1, 0)
	release()

	hole.holed.Store(true)
	hole.holeNew.Store(true)
	start := time.Now()
	release = acquire()
	if d := time.Since(start); d > time.Second {
		t.Errorf("the first Acquire with Redis gone took %v, want about the 200ms timeout", d)
	}
	if !mon.Degraded() {
		t.Fatal("not degraded after a failed call")
	}
	if in, _ := local.Load("k"); in != 1 {
		t.Errorf("the local gate holds %d, want 1", in)
	}
	release()
	start = time.Now()
	acquire()() // degraded: the local gate at once
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Errorf("an Acquire while degraded took %v, want no call to Redis", d)
	}

	hole.holed.Store(false)
	hole.holeNew.Store(false)
	waitFor(t, 5*time.Second, "the Monitor to find Redis again", func() bool { return !mon.Degraded() })
	release = acquire()
	checkLoad(t, shared, "k", 1, 0)
	release()
	mu.Lock()
	defer mu.Unlock()
	if len(changes) != 2 || !changes[0] || changes[1] {
		t.Errorf("onChange told %v, want [true false]", changes)
	}
}
