package redisgate_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gate"
	"github.com/outlast-llm/outlast/internal/fleettest"
	"github.com/outlast-llm/outlast/redisgate"
)

// The Fleet's rules (internal/fleettest) through Redis: each member has a
// client and a Fleet of its own, as a process would, on one Prefix.
func TestFleetRules(t *testing.T) {
	opts := redisOptions(t)
	fleettest.Run(t, func(t *testing.T, maxLimit int) func(*outlast.Admission) {
		prefix := testPrefix()
		return func(a *outlast.Admission) {
			f := redisgate.NewFleet(newClient(t, opts), redisgate.FleetOptions{Prefix: prefix, MaxLimit: maxLimit, Lease: time.Second})
			f.Join(a)
			t.Cleanup(func() { f.Close() })
		}
	})
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
	calls := &counter{} // the gate's calls to Redis; the Monitor pings on a client of its own
	client.AddHook(calls)
	var mu sync.Mutex
	var changes []bool
	mon := redisgate.NewMonitor(newClient(t, &o), 50*time.Millisecond, 200*time.Millisecond, func(degraded bool, err error) {
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
	before := calls.n.Load()
	acquire()() // degraded: the local gate at once
	if n := calls.n.Load() - before; n != 0 {
		t.Errorf("an Acquire while degraded made %d calls to Redis, want none", n)
	}

	hole.holed.Store(false)
	hole.holeNew.Store(false)
	eventually(t, 5*time.Second, "the Monitor to find Redis again", func() bool { return !mon.Degraded() })
	release = acquire()
	checkLoad(t, shared, "k", 1, 0)
	release()
	mu.Lock()
	defer mu.Unlock()
	if len(changes) != 2 || !changes[0] || changes[1] {
		t.Errorf("onChange told %v, want [true false]", changes)
	}
}

// A process that asks for the probe after another's probe was answered,
// before it learned the answer, is refused and learns that the key
// recovers: its probe would be a request sent beside the fleet's limit,
// and would tell the others the key was down again. (TestFleetRules
// caught it as a peak of 4 over a limit of 3, about once in 15 runs.)
func TestFleetProbeAfterAnswer(t *testing.T) {
	t.Parallel()
	opts := redisOptions(t)
	prefix := testPrefix()
	var mu sync.Mutex
	var learned []outlast.UpstreamState // b's states, in order
	fleet := func(onState func(string, outlast.UpstreamState, outlast.UpstreamState, time.Time)) *redisgate.Fleet {
		f := redisgate.NewFleet(newClient(t, opts), redisgate.FleetOptions{Prefix: prefix, MaxLimit: 4})
		t.Cleanup(func() { f.Close() })
		f.Join(&outlast.Admission{MaxLimit: 4, OnState: onState})
		return f
	}
	fa := fleet(nil)
	fb := fleet(func(_ string, _, to outlast.UpstreamState, _ time.Time) {
		mu.Lock()
		learned = append(learned, to)
		mu.Unlock()
	})
	done, ok := fa.Probe("k")
	if !ok {
		t.Fatal("the first probe: refused, want taken")
	}
	done(outlast.FleetState{State: outlast.Recovering, Limit: 2})
	if _, ok := fb.Probe("k"); ok {
		t.Fatal("a probe asked for after another's probe was answered with recovering: taken, want refused")
	}
	mu.Lock()
	if len(learned) == 0 || learned[0] != outlast.Recovering {
		t.Errorf("the refused process's states: %v, want recovering first, from the refusal's reply", learned)
	}
	mu.Unlock()

	// Once a process finds the key down again and tells so, the next
	// probe may go.
	fb.Tell("k", outlast.FleetState{State: outlast.Down})
	eventually(t, 5*time.Second, "the told state to be written", func() bool {
		done, ok := fa.Probe("k")
		if ok {
			done(outlast.FleetState{State: outlast.Down})
		}
		return ok
	})
}

// refusing is an upstream that refuses every attempt after a short while,
// and keeps the most attempts it had in flight at once.
type refusing struct {
	mu             sync.Mutex
	inFlight, peak int
}

func (u *refusing) RoundTrip(r *http.Request) (*http.Response, error) {
	u.mu.Lock()
	u.inFlight++
	u.peak = max(u.peak, u.inFlight)
	u.mu.Unlock()
	time.Sleep(30 * time.Millisecond) // so that overlaps can show
	u.mu.Lock()
	u.inFlight--
	u.mu.Unlock()
	return nil, syscall.ECONNREFUSED
}

// holedFleet returns a Fleet with fo's options whose Redis is reached
// through a blackhole, with a Monitor of its own and a Timeout of 200 ms.
func holedFleet(t *testing.T, opts *redis.Options, fo redisgate.FleetOptions) (*blackhole, *redisgate.Fleet, *redisgate.Monitor) {
	t.Helper()
	hole := newBlackhole(t, opts.Addr)
	o := *opts
	o.Addr, o.ContextTimeoutEnabled, o.MaxRetries = hole.addr(), true, -1
	// A new connection's handshake has the client's own timeouts, not the
	// Fleet's: held to its Timeout, so that a call fails within it.
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
	mon := redisgate.NewMonitor(newClient(t, &o), 50*time.Millisecond, 200*time.Millisecond, nil)
	t.Cleanup(func() { mon.Close() })
	fo.Timeout, fo.Monitor = 200*time.Millisecond, mon
	f := redisgate.NewFleet(newClient(t, &o), fo)
	t.Cleanup(func() { f.Close() })
	return hole, f, mon
}

// What a process tells while Redis cannot be reached is written once it
// answers again: else the shared state stays what it was when Redis went
// away (here a recovery), and a process that found the upstream down
// meanwhile is refused the probe by that recovery and sends under its old
// limit into a down upstream, not one probe. (A review found it.)
func TestFleetTellsAfterDegraded(t *testing.T) {
	t.Parallel()
	opts := redisOptions(t)
	prefix := testPrefix()
	fa := redisgate.NewFleet(newClient(t, opts), redisgate.FleetOptions{Prefix: prefix, MaxLimit: 8})
	t.Cleanup(func() { fa.Close() })
	fa.Join(&outlast.Admission{MaxLimit: 8})
	hole, fb, mon := holedFleet(t, opts, redisgate.FleetOptions{Prefix: prefix, MaxLimit: 8})
	b := &outlast.Admission{MaxLimit: 8, ProbeWaits: []time.Duration{100 * time.Millisecond}}
	fb.Join(b)

	done, ok := fa.Probe("model.test")
	if !ok {
		t.Fatal("the first probe: refused, want taken")
	}
	done(outlast.FleetState{State: outlast.Recovering, Limit: 4}) // the shared state: recovering at 4

	// Redis goes away for b, which finds the upstream down alone.
	hole.holed.Store(true)
	hole.holeNew.Store(true)
	u := &refusing{}
	send := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://model.test/", nil)
		(&outlast.Transport{Base: u, Admission: b, Policy: &outlast.Policy{MaxAttempts: 1, Reserve: -1}}).RoundTrip(req)
	}
	for range 3 {
		send()
	}
	eventually(t, 5*time.Second, "b's Fleet to be degraded", mon.Degraded)
	if s := b.State("model.test"); s.State != outlast.Down {
		t.Fatalf("b after three refused attempts: %v, want down", s.State)
	}
	hole.holed.Store(false)
	hole.holeNew.Store(false)
	eventually(t, 5*time.Second, "the Monitor to find Redis again", func() bool { return !mon.Degraded() })

	u.mu.Lock()
	u.peak = 0
	u.mu.Unlock()
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(send)
	}
	wg.Wait()
	if u.peak > 1 {
		t.Errorf("a down key sent %d attempts at once after Redis came back, want 1, the fleet's probe: the shared state was the recovery from before", u.peak)
	}
}

// sharedState returns the state a Fleet under prefix keeps for key in
// Redis, "" for none.
func sharedState(t *testing.T, client *redis.Client, prefix, key string) string {
	t.Helper()
	st, err := client.HGet(context.Background(), prefix+"{"+key+"}:s", "st").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return st
}

// A probe answered while Redis cannot be reached: its answer is written
// once Redis is back, over what was told before it, and answering costs
// the request no call to Redis meanwhile. (A review found the answer
// lost, and the older state written instead.)
func TestFleetProbeEndWhileDegraded(t *testing.T) {
	t.Parallel()
	opts := redisOptions(t)
	prefix := testPrefix()
	direct := newClient(t, opts)
	hole, f, mon := holedFleet(t, opts, redisgate.FleetOptions{Prefix: prefix})
	f.Join(&outlast.Admission{})

	done, ok := f.Probe("k")
	if !ok {
		t.Fatal("the probe of a new key: refused, want taken")
	}
	hole.holed.Store(true)
	hole.holeNew.Store(true)
	f.Tell("k", outlast.FleetState{State: outlast.Probing, NextProbe: time.Now().Add(time.Minute)})
	eventually(t, 5*time.Second, "the Fleet to be degraded", mon.Degraded)
	done(outlast.FleetState{State: outlast.Healthy}) // the probe's answer, with no call to Redis
	if !redisgate.ProbeEndPending(f, "k") {
		t.Error("the probe's answer, told while degraded: not kept to write")
	}
	hole.holed.Store(false)
	hole.holeNew.Store(false)
	eventually(t, 5*time.Second, "the probe's answer to be written", func() bool {
		return sharedState(t, direct, prefix, "k") == strconv.Itoa(int(outlast.Healthy))
	})
	if n := direct.Exists(context.Background(), prefix+"{k}:p").Val(); n != 0 {
		t.Error("the probe is still held after its answer was written")
	}
}

// A state told after a probe's answer, before the answer is written (the
// teller busy with another key), is the one written: the key found down
// again, not the answer's recovery. (A review found the answer written
// over it.)
func TestFleetProbeEndThenTell(t *testing.T) {
	t.Parallel()
	opts := redisOptions(t)
	prefix := testPrefix()
	client := newClient(t, opts)
	f := redisgate.NewFleet(client, redisgate.FleetOptions{Prefix: prefix})
	t.Cleanup(func() { f.Close() })
	f.Join(&outlast.Admission{})
	done, ok := f.Probe("k")
	if !ok {
		t.Fatal("the probe of a new key: refused, want taken")
	}
	unlock := redisgate.HoldTeller(f)
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		done(outlast.FleetState{State: outlast.Recovering, Limit: 2})
	}()
	eventually(t, 5*time.Second, "the answer to wait to be written", func() bool { return redisgate.ProbeEndPending(f, "k") })
	f.Tell("k", outlast.FleetState{State: outlast.Down, NextProbe: time.Now().Add(time.Minute)})
	unlock()
	<-answered
	if st := sharedState(t, client, prefix, "k"); st != strconv.Itoa(int(outlast.Down)) {
		t.Errorf("the shared state %q, want %d, down: told after the answer", st, outlast.Down)
	}
	if n := client.Exists(context.Background(), prefix+"{k}:p").Val(); n != 0 {
		t.Error("the probe is still held after its end was written")
	}
}

// Close returns though the Fleet's Monitor was closed first and its
// client too, with a state left to write. (A review found its teller
// spinning on the failed write.)
func TestFleetCloseAfterMonitor(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(redisOptions(t))
	mon := redisgate.NewMonitor(client, 0, 0, nil)
	f := redisgate.NewFleet(client, redisgate.FleetOptions{Prefix: testPrefix(), Monitor: mon})
	f.Join(&outlast.Admission{})
	mon.Close()
	client.Close()
	f.Tell("k", outlast.FleetState{State: outlast.Down})
	closed := make(chan struct{})
	go func() {
		f.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return within 5 s")
	}
}
