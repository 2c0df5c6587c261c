package outlast_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gate"
)

// inflight is a base transport that counts the requests in flight at once,
// counting a request until its response body has ended or is closed, as a
// server's slot is busy until then.
type inflight struct {
	now, peak atomic.Int32
	order     []string // the X-Run header of each attempt, in arrival order
	mu        sync.Mutex
	fail      map[string]int // X-Run → failures before success
	work      time.Duration
}

func (s *inflight) RoundTrip(r *http.Request) (*http.Response, error) {
	n := s.now.Add(1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	run := r.Header.Get("X-Run")
	s.mu.Lock()
	s.order = append(s.order, run)
	failing := s.fail[run] > 0
	if failing {
		s.fail[run]--
	}
	s.mu.Unlock()
	time.Sleep(s.work)
	status := 200
	if failing {
		status = 503
	}
	return &http.Response{StatusCode: status, Header: http.Header{}, Body: &doneBody{s: s}, Request: r}, nil
}

type doneBody struct {
	s    *inflight
	once sync.Once
	read bool
}

func (b *doneBody) Read(p []byte) (int, error) {
	if !b.read {
		b.read = true
		return copy(p, "ok"), nil
	}
	b.once.Do(func() { b.s.now.Add(-1) })
	return 0, io.EOF
}

func (b *doneBody) Close() error {
	b.once.Do(func() { b.s.now.Add(-1) })
	return nil
}

// Through the Transport, a gate of one slot lets one attempt be in flight
// at a time, serves the waiting requests in arrival order, refuses the
// one over the queue bound, and is not held during a retry's wait: a
// waiting request goes ahead while another waits to retry.
func TestTransportWithGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &inflight{work: time.Second, fail: map[string]int{"a": 1}}
		g := gate.New(1, 2)
		tr := &outlast.Transport{Base: base, Gate: g, Policy: &outlast.Policy{Waits: []time.Duration{500 * time.Millisecond}}, Logger: discardLogger()}
		results := make(map[string]error)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, run := range []string{"a", "b", "c", "d"} {
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodPost, "http://slot.test/completion", nil)
				req.Header.Set("X-Run", run)
				resp, err := tr.RoundTrip(req)
				if err == nil {
					time.Sleep(100 * time.Millisecond) // the host is slow to read: the slot stays held
					io.Copy(io.Discard, resp.Body)
					time.Sleep(100 * time.Millisecond) // and slow to close: the slot is free at EOF
					resp.Body.Close()
				}
				mu.Lock()
				results[run] = err
				mu.Unlock()
			})
			synctest.Wait() // each request arrives, and queues, before the next
		}
		wg.Wait()
		if !errors.Is(results["d"], outlast.ErrBusy) || !errors.Is(results["d"], gate.ErrBusy) {
			t.Errorf("d: got %v, want busy (queue of 2 already full)", results["d"])
		}
		for _, run := range []string{"a", "b", "c"} {
			if results[run] != nil {
				t.Errorf("%s: got %v, want success", run, results[run])
			}
		}
		// a fails and waits 500 ms without the slot; b and c go ahead of
		// its retry, in their arrival order.
		if got, want := base.order, []string{"a", "b", "c", "a"}; !equalStrings(got, want) {
			t.Errorf("got attempt order %v, want %v", got, want)
		}
		if p := base.peak.Load(); p != 1 {
			t.Errorf("got %d attempts in flight at once, want 1", p)
		}
		if held, waiting := g.Load("slot.test"); held != 0 || waiting != 0 {
			t.Errorf("after all: %d held, %d waiting, want 0 0", held, waiting)
		}
	})
}

// A caller that gives up while queued leaves the gate as it was.
func TestTransportGateCancelWhileQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &inflight{work: 10 * time.Second, fail: map[string]int{}}
		g := gate.New(1, 4)
		tr := &outlast.Transport{Base: base, Gate: g}
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, "http://slot.test/", nil)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
		})
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://slot.test/", nil)
		if _, err := tr.RoundTrip(req); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want the deadline", err)
		}
		if held, waiting := g.Load("slot.test"); held != 1 || waiting != 0 {
			t.Errorf("got %d held, %d waiting, want 1 0", held, waiting)
		}
	})
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A retry's wait at the gate stops at the deadline less the reserve, as
// its wait before the gate does; the first attempt may queue to the
// deadline itself.
func TestTransportGateWaitKeepsReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := gate.New(1, 4)
		hold := &inflight{work: 100 * time.Second, fail: map[string]int{}}
		// One request holds the slot for 100 s, from t = 5 s.
		var wg sync.WaitGroup
		defer wg.Wait()
		holder := &outlast.Transport{Base: hold, Gate: g}
		wg.Go(func() {
			time.Sleep(5 * time.Second)
			req, _ := http.NewRequest(http.MethodGet, "http://slot.test/", nil)
			if resp, err := holder.RoundTrip(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
		// Ours fails at once (503), waits 10 s, then finds the slot held.
		fake := newFake(step{status: 503}, step{})
		tr := &outlast.Transport{Base: fake, Gate: g, Policy: &outlast.Policy{Waits: []time.Duration{10 * time.Second}, Reserve: 20 * time.Second}, Logger: discardLogger()}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://slot.test/", nil)
		start := time.Now()
		_, err := tr.RoundTrip(req)
		var se *outlast.StatusError
		if !errors.Is(err, outlast.ErrNoTime) || !errors.As(err, &se) || se.StatusCode != 503 {
			t.Fatalf("got %v, want ErrNoTime wrapping the 503", err)
		}
		if got := time.Since(start); got != 40*time.Second {
			t.Errorf("gave up after %v, want 40s: the deadline less the reserve", got)
		}
		if held, waiting := g.Load("slot.test"); held != 1 || waiting != 0 {
			t.Errorf("got %d held, %d waiting, want 1 0: the give-up left the queue", held, waiting)
		}
	})
}

// Do around a gated Transport: the outer retry's wait at the inner gate
// stops where the outer policy's reserve begins, as the Transport's own
// retry does, rather than running to the deadline as a first attempt may.
func TestDoAroundGateKeepsTheReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Header.Get("X-Id") == "hog" {
				t := time.NewTimer(time.Minute)
				defer t.Stop()
				select {
				case <-t.C:
				case <-r.Context().Done():
					return nil, r.Context().Err()
				}
				return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
			}
			return &http.Response{StatusCode: 503, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
		})
		tr := &outlast.Transport{Base: base, Gate: gate.New(1, 4)}
		p := &outlast.Policy{Waits: []time.Duration{time.Second}, Reserve: 10 * time.Second}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		start := time.Now()
		hogDone := make(chan struct{})
		n := 0
		err := outlast.Do(ctx, p, func(ctx context.Context) error {
			n++
			if n == 2 { // the slot is taken while the outer layer waits
				go func() {
					defer close(hogDone)
					req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://model.test/", nil)
					req.Header.Set("X-Id", "hog")
					if resp, err := tr.RoundTrip(req); err == nil {
						resp.Body.Close()
					}
				}()
				synctest.Wait()
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://model.test/", nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			return &outlast.StatusError{StatusCode: resp.StatusCode}
		})
		if !errors.Is(err, outlast.ErrNoTime) {
			t.Errorf("got %v, want ErrNoTime: the retry's wait at the gate reached the reserve", err)
		}
		if d := time.Since(start); d != 20*time.Second {
			t.Errorf("Do returned after %v, want 20 s: the 30 s deadline less the 10 s reserve", d)
		}
		if n != 2 {
			t.Errorf("%d attempts, want 2", n)
		}
		<-hogDone
	})
}

// A recovering key's limit ends at the capacity of the Gate its attempts
// go through, unless MaxLimit says otherwise: the recovery starts at a
// quarter of it.
func TestAdmissionCeilingFromGate(t *testing.T) {
	for _, c := range []struct {
		maxLimit, want int
	}{{0, 10}, {8, 2}} {
		t.Run(fmt.Sprintf("MaxLimit %d", c.maxLimit), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				u := &upstream{up: time.Now().Add(500 * time.Millisecond), service: time.Second}
				onState, recovering := firstChange(outlast.Recovering)
				a := &outlast.Admission{MaxLimit: c.maxLimit, OnState: onState}
				tr := &outlast.Transport{Base: u, Policy: patient(), Admission: a, Gate: gate.New(40, 1<<20)}
				for i := range 3 {
					send1(t.Context(), &outlast.Transport{Base: u, Admission: a, Gate: tr.Gate}, "mark"+strconv.Itoa(i))
				}
				done := make(chan struct{})
				go func() { sendAll(t, tr, 20, time.Minute); close(done) }()
				<-recovering
				if s := a.State("model.test"); s.Limit != c.want {
					t.Errorf("limit %d as the key recovers through a gate of 40, want %d", s.Limit, c.want)
				}
				<-done
			})
		})
	}
}
