package outlast_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/internal/fleettest"
)

// memFleet is a Fleet in memory, for several Admissions in one test: it
// tells each member's changes to the others at once, holds one probe per
// key, and counts each key's places under the limit across members.
type memFleet struct {
	mu      sync.Mutex
	members []*outlast.Admission
	probe   map[string]bool
	state   map[string]outlast.FleetState // the last told, by key
	sending map[string]int
	freed   chan struct{} // closed and replaced when a place is given back
	probes  int           // probes granted
	tells   int
}

// emptyMemFleet returns a memFleet with no members yet.
func emptyMemFleet() *memFleet {
	return &memFleet{probe: map[string]bool{}, state: map[string]outlast.FleetState{}, sending: map[string]int{}, freed: make(chan struct{})}
}

func newMemFleet(n int, newAdmission func() *outlast.Admission) (*memFleet, []*outlast.Admission) {
	f := emptyMemFleet()
	for i := range n {
		a := newAdmission()
		a.Fleet = &memMember{f: f, self: i}
		f.members = append(f.members, a)
	}
	return f, f.members
}

type memMember struct {
	f    *memFleet
	self int
}

func (m *memMember) Tell(key string, s outlast.FleetState) {
	m.f.mu.Lock()
	m.f.tells++
	m.f.state[key] = s
	members := m.f.members
	m.f.mu.Unlock()
	for i, a := range members {
		if i != m.self {
			a.Learn(key, s)
		}
	}
}

func (m *memMember) Probe(key string) (func(outlast.FleetState), bool) {
	f := m.f
	f.mu.Lock()
	if f.probe[key] {
		f.mu.Unlock()
		return nil, false
	}
	if s := f.state[key]; s.State == outlast.Recovering {
		// Another's probe was answered: learn it, as redisgate's
		// refusal tells the shared state.
		f.mu.Unlock()
		f.members[m.self].Learn(key, s)
		return nil, false
	}
	f.probe[key] = true
	f.probes++
	f.mu.Unlock()
	var once sync.Once
	return func(s outlast.FleetState) {
		once.Do(func() {
			f.mu.Lock()
			delete(f.probe, key)
			f.state[key] = s // with the probe's end, as redisgate's script does
			f.mu.Unlock()
			m.Tell(key, s)
		})
	}, true
}

func (m *memMember) Send(ctx context.Context, key string, limit int) (func(), error) {
	f := m.f
	if err := ctx.Err(); err != nil {
		return nil, err // as redisgate's: an ended context asks nothing
	}
	for {
		f.mu.Lock()
		if f.sending[key] < limit {
			f.sending[key]++
			f.mu.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					f.mu.Lock()
					f.sending[key]--
					close(f.freed)
					f.freed = make(chan struct{})
					f.mu.Unlock()
				})
			}, nil
		}
		freed := f.freed
		f.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Three processes that share a Fleet act as one Admission: a key that
// one finds down is down for all, one probe is in flight for the whole
// fleet, and while the key recovers the fleet's requests in flight
// follow one limit. The same three processes without a Fleet each probe
// and each release up to their own limit: the control, which shows that
// the checks can fail.
func TestFleetActsAsOne(t *testing.T) {
	for _, shared := range []bool{true, false} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				u := &upstream{up: start.Add(10 * time.Second), service: time.Second}
				newAdmission := func() *outlast.Admission { return &outlast.Admission{MaxLimit: 4} }
				var members []*outlast.Admission
				var f *memFleet
				if shared {
					f, members = newMemFleet(3, newAdmission)
				} else {
					members = []*outlast.Admission{newAdmission(), newAdmission(), newAdmission()}
				}
				// The first process alone sees the outage begin.
				for i := range 3 {
					send1(t.Context(), &outlast.Transport{Base: u, Admission: members[0]}, fmt.Sprintf("mark%d", i))
				}
				if shared {
					for i, a := range members {
						if s := a.State("model.test"); s.State != outlast.Down {
							t.Fatalf("process %d: %v after another marked the key down, want down", i, s.State)
						}
					}
				}
				var wg sync.WaitGroup
				for i := range 60 {
					tr := &outlast.Transport{Base: u, Policy: patient(), Admission: members[i%3]}
					wg.Go(func() {
						ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
						defer cancel()
						if err := send1(ctx, tr, fmt.Sprintf("%02d", i)); err != nil {
							t.Errorf("request %d: %v", i, err)
						}
					})
					synctest.Wait()
				}
				wg.Wait()
				down := u.sentBetween(start.Add(time.Millisecond), u.up)
				switch {
				case shared && u.downPeak > 1:
					t.Errorf("%d attempts in flight at once while down, want 1: the fleet's one probe", u.downPeak)
				case shared && down > 7:
					t.Errorf("%d probes in 10 s of outage, want at most 7 (1 s, 2 s, then every 4 s, jittered, for the fleet)", down)
				case shared && u.peak > 4:
					t.Errorf("peak in flight %d, want at most the fleet's MaxLimit 4", u.peak)
				case !shared && u.peak <= 4:
					t.Errorf("control: peak in flight %d without a Fleet, want above one process's MaxLimit 4", u.peak)
				}
				if shared {
					for i, a := range members {
						if s := a.State("model.test"); s.State != outlast.Healthy {
							t.Errorf("process %d after the backlog: %+v, want healthy", i, s)
						}
					}
				}
				if shared && f.probes == 0 {
					t.Error("the Fleet granted no probe")
				}
				t.Logf("shared=%v: %d attempts while down, peak %d, down peak %d", shared, down, u.peak, u.downPeak)
			})
		})
	}
}

// A not-before time that one process of a fleet learns holds for all of
// them: another process's request waits for it, though it never saw the
// server's delay itself.
func TestFleetSharesNotBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(step{status: 503, header: map[string]string{"Retry-After": "8"}}, step{})
		_, members := newMemFleet(2, func() *outlast.Admission { return &outlast.Admission{} })
		start := time.Now()
		send1(t.Context(), &outlast.Transport{Base: f, Admission: members[0]}, "a")
		if err := send1(t.Context(), &outlast.Transport{Base: f, Admission: members[1]}, "b"); err != nil {
			t.Fatal(err)
		}
		at := f.attempts()
		if len(at) != 2 {
			t.Fatalf("%d attempts, want 2", len(at))
		}
		if d := at[1].at.Sub(start); d < 8*time.Second || d > 8800*time.Millisecond {
			t.Errorf("the other process's request went after %v, want at the not-before time the first learned, 8 s (to 8.8 s)", d)
		}
	})
}

// The Fleet's rules (internal/fleettest), over the Fleet in memory, as
// redisgate's tests run them over Redis.
func TestFleetRules(t *testing.T) {
	fleettest.Run(t, func(t *testing.T, maxLimit int) func(*outlast.Admission) {
		f := emptyMemFleet()
		return func(a *outlast.Admission) {
			f.mu.Lock()
			a.Fleet = &memMember{f: f, self: len(f.members)}
			f.members = append(f.members, a)
			f.mu.Unlock()
		}
	})
}

// fullFleet grants every probe and never a place under its limit: a fleet
// whose other processes hold every place while the key recovers.
type fullFleet struct{}

func (fullFleet) Tell(string, outlast.FleetState) {}
func (fullFleet) Probe(string) (func(outlast.FleetState), bool) {
	return func(outlast.FleetState) {}, true
}
func (fullFleet) Send(ctx context.Context, _ string, _ int) (func(), error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A request that waits for a place under the fleet's limit until its
// deadline less its reserve gets ErrUpstreamDown then, with the last
// failure, as it would waiting in the queue: not a bare deadline error
// while its own context still has its reserve.
func TestFleetSendBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		u := &upstream{up: start.Add(500 * time.Millisecond), service: time.Second}
		a := &outlast.Admission{MaxLimit: 8, Fleet: fullFleet{}}
		markDown(t, u, a)
		tr := &outlast.Transport{Base: u, Policy: patient(), Admission: a}
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := send1(t.Context(), tr, "probe"); err != nil {
				t.Errorf("the probe: %v", err)
			}
		})
		synctest.Wait()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		err := send1(ctx, tr, "second")
		if !errors.Is(err, outlast.ErrUpstreamDown) || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("waiting for the fleet's place to its bound: %v, want ErrUpstreamDown wrapping the last failure", err)
		}
		if at := time.Since(start); at != 29*time.Second {
			t.Errorf("it returned %v after the start, want 29 s: its deadline less the 1 s reserve", at)
		}
		wg.Wait()
	})
}

// With a Fleet, a probe's 429, which puts the key down again, reaches the
// other processes with its next probe: none of them sends into the
// upstream that is full of others' requests before then.
func TestFleetSharesFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refused := step{err: errRefused}
		f := newFake(refused, refused, refused, step{status: 429}, step{})
		full := make(chan time.Time, 1)
		first := true
		_, members := newMemFleet(2, func() *outlast.Admission {
			a := &outlast.Admission{ProbeWaits: []time.Duration{4 * time.Second}}
			if first {
				first = false
				a.OnState = func(_ string, from, to outlast.UpstreamState, at time.Time) {
					if from == outlast.Probing && to == outlast.Down {
						select {
						case full <- at:
						default:
						}
					}
				}
			}
			return a
		})
		markDown(t, f, members[0])
		var wg sync.WaitGroup
		wg.Go(func() {
			// The probe, whose 429 puts the key down again.
			if err := send1(t.Context(), &outlast.Transport{Base: f, Policy: patient(), Admission: members[0]}, "front"); err != nil {
				t.Errorf("front: %v", err)
			}
		})
		answered := <-full
		synctest.Wait()
		if err := send1(t.Context(), &outlast.Transport{Base: f, Policy: patient(), Admission: members[1]}, "other"); err != nil {
			t.Errorf("other: %v", err)
		}
		wg.Wait()
		for _, x := range f.attempts()[4:] {
			if x.at.Before(answered.Add(4 * time.Second)) {
				t.Errorf("attempts %v: one went %v after the probe's 429, want 4 s or more", f.attempts(), x.at.Sub(answered))
				break
			}
		}
	})
}

// A key told healthy by the fleet while a server's not-before time of its
// own is still ahead does not send before that time.
func TestFleetHealthyKeepsNotBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(step{status: 503, header: map[string]string{"Retry-After": "10"}}, step{})
		a := &outlast.Admission{}
		send1(t.Context(), &outlast.Transport{Base: f, Admission: a}, "first")
		nb := a.State("model.test").NotBefore
		if nb.IsZero() {
			t.Fatalf("state %+v, want a not-before time", a.State("model.test"))
		}
		a.Learn("model.test", outlast.FleetState{State: outlast.Healthy})
		if err := send1(t.Context(), &outlast.Transport{Base: f, Admission: a}, "next"); err != nil {
			t.Fatal(err)
		}
		if at := f.attempts(); len(at) != 2 || at[1].at.Before(nb) {
			t.Errorf("attempts %v, want the second at or after the not-before time %v, though the fleet said healthy", at, nb)
		}
	})
}

// stepper is an upstream whose first three attempts are refused and whose
// later attempts each wait for the test to answer them: a 200.
type stepper struct {
	n      atomic.Int32
	answer chan struct{}
}

func (s *stepper) RoundTrip(r *http.Request) (*http.Response, error) {
	if s.n.Add(1) <= 3 {
		return nil, errRefused
	}
	select {
	case <-s.answer:
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
}

// A recovering key that learns the fleet's limit keeps the fraction its
// own successes grew while the whole number told is its own: the limit is
// told in whole requests, so taking 2 for 2.5 would undo every success
// that another process's news follows, and the fleet's limit would grow
// slower than one process's.
func TestLearnKeepsGrowth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u := &stepper{answer: make(chan struct{})}
		a := &outlast.Admission{MaxLimit: 8} // starts recovering at 2
		markDown(t, u, a)
		var wg sync.WaitGroup
		for i := range 6 {
			tr := &outlast.Transport{Base: u, Policy: patient(), Admission: a}
			wg.Go(func() { send1(t.Context(), tr, strconv.Itoa(i)) })
		}
		answer := func() {
			u.answer <- struct{}{}
			synctest.Wait()
		}
		time.Sleep(2 * time.Second) // the probe goes
		synctest.Wait()
		answer() // the probe: recovering at 2
		if s := a.State("model.test"); s.State != outlast.Recovering || s.Limit != 2 {
			t.Fatalf("after the probe: %+v, want recovering at 2", s)
		}
		answer() // 2.5
		a.Learn("model.test", outlast.FleetState{State: outlast.Recovering, Limit: 2})
		answer() // 3, unless the news took the half back
		if s := a.State("model.test"); s.Limit != 3 {
			t.Errorf("after two successes and the fleet's news of 2: limit %d, want 3", s.Limit)
		}
		a.Learn("model.test", outlast.FleetState{State: outlast.Recovering, Limit: 1})
		if s := a.State("model.test"); s.Limit != 1 {
			t.Errorf("after the fleet's news of 1: limit %d, want 1: a lower whole number is taken", s.Limit)
		}
		close(u.answer) // the rest at once
		wg.Wait()
	})
}

// growthWatch counts an upstream's successes and the requests in flight
// at each attempt's start, and keeps the most by which the requests in
// flight went past a limit that starts at start and grows by half a
// request per success, as one Admission's does.
type growthWatch struct {
	base  http.RoundTripper
	start int

	mu        sync.Mutex
	inFlight  int
	successes int
	over      int
}

func (g *growthWatch) RoundTrip(r *http.Request) (*http.Response, error) {
	g.mu.Lock()
	g.inFlight++
	g.over = max(g.over, g.inFlight-(g.start+g.successes/2))
	g.mu.Unlock()
	resp, err := g.base.RoundTrip(r)
	g.mu.Lock()
	g.inFlight--
	if err == nil && resp.StatusCode == 200 {
		g.successes++
	}
	g.mu.Unlock()
	return resp, err
}

// A process of a fleet whose own queue is empty does not end the fleet's
// recovery: while another still has a backlog, the fleet's requests in
// flight grow with its successes, as one Admission's would, rather than
// jump to MaxLimit when the first process is done with its own.
func TestFleetRecoveryOutlastsOneQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		u := &upstream{up: start.Add(5 * time.Second), service: time.Second}
		g := &growthWatch{base: u, start: 4} // a quarter of MaxLimit
		_, members := newMemFleet(2, func() *outlast.Admission { return &outlast.Admission{MaxLimit: 16} })
		markDown(t, g, members[0])
		var wg sync.WaitGroup
		for i := range 60 {
			a := members[1] // the backlog is the second process's, but for 3 requests
			if i < 3 {
				a = members[0]
			}
			tr := &outlast.Transport{Base: g, Policy: patient(), Admission: a}
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
				defer cancel()
				if err := send1(ctx, tr, strconv.Itoa(i)); err != nil {
					t.Errorf("request %d: %v", i, err)
				}
			})
			synctest.Wait()
		}
		wg.Wait()
		if g.over > 1 {
			t.Errorf("requests in flight went %d past a limit that grows from 4 by half a request per success: the fleet's recovery jumped", g.over)
		}
		for i, a := range members {
			if s := a.State("model.test"); s.State != outlast.Healthy {
				t.Errorf("process %d after the backlog: %+v, want healthy", i, s)
			}
		}
	})
}
