package outlast_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast"
)

// upstream is a fake upstream in virtual time: down (refusing, or
// answering with down's status and header) until up, then answering 200
// after service. It records what it saw, and how many were in flight.
type upstream struct {
	up      time.Time
	service time.Duration
	status  int               // while down: 0 refuses the connection
	header  map[string]string // while down, on the status

	mu       sync.Mutex
	inFlight int
	peak     int // the most in flight at once
	downPeak int // the most in flight at once while down
	sent     []time.Time
	order    []string // the X-Id of each attempt, in order
}

func (u *upstream) RoundTrip(r *http.Request) (*http.Response, error) {
	now := time.Now()
	u.mu.Lock()
	u.sent = append(u.sent, now)
	u.order = append(u.order, r.Header.Get("X-Id"))
	u.inFlight++
	u.peak = max(u.peak, u.inFlight)
	down := now.Before(u.up)
	if down {
		u.downPeak = max(u.downPeak, u.inFlight)
	}
	u.mu.Unlock()
	done := func() {
		u.mu.Lock()
		u.inFlight--
		u.mu.Unlock()
	}
	if down {
		defer done()
		if u.status == 0 {
			return nil, errRefused
		}
		h := http.Header{}
		for k, v := range u.header {
			h.Set(k, v)
		}
		return &http.Response{StatusCode: u.status, Header: h, Body: http.NoBody, Request: r}, nil
	}
	t := time.NewTimer(u.service)
	select {
	case <-t.C:
	case <-r.Context().Done():
		done()
		return nil, r.Context().Err()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: &overBody{done: done}, Request: r}, nil
}

// overBody is an empty body that counts its request as over when closed.
type overBody struct {
	once sync.Once
	done func()
}

func (b *overBody) Read([]byte) (int, error) { b.once.Do(b.done); return 0, io.EOF }
func (b *overBody) Close() error             { b.once.Do(b.done); return nil }

// sentBetween counts the attempts the upstream saw in [from, to).
func (u *upstream) sentBetween(from, to time.Time) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, at := range u.sent {
		if !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return n
}

// send1 sends one request through tr under ctx, with id as its X-Id, and
// reads its body to the end.
func send1(ctx context.Context, tr http.RoundTripper, id string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://model.test/v1/chat/completions", nil)
	req.Header.Set("X-Id", id)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// sendBy is send1 with deadline as the request's deadline.
func sendBy(t *testing.T, tr http.RoundTripper, id string, deadline time.Time) error {
	ctx, cancel := context.WithDeadline(t.Context(), deadline)
	defer cancel()
	return send1(ctx, tr, id)
}

// markDown marks a's key of base down: three refused or failed requests
// in a row, with no policy.
func markDown(t *testing.T, base http.RoundTripper, a *outlast.Admission) {
	t.Helper()
	for i := range 3 {
		send1(t.Context(), &outlast.Transport{Base: base, Admission: a}, "mark"+strconv.Itoa(i))
	}
}

// sendAll sends n requests through tr at once, each with a timeout of its
// own, and waits for them: each must succeed.
func sendAll(t *testing.T, tr http.RoundTripper, n int, timeout time.Duration) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), timeout)
			defer cancel()
			if err := send1(ctx, tr, strconv.Itoa(i)); err != nil {
				t.Errorf("request %d: %v", i, err)
			}
		})
	}
	wg.Wait()
}

// firstSentFrom returns when u saw its first attempt at or after from.
func (u *upstream) firstSentFrom(from time.Time) time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, at := range u.sent {
		if !at.Before(from) {
			return at
		}
	}
	return time.Time{}
}

// firstChange returns an OnState func and a channel that gets the time of
// the first change to state to.
func firstChange(to outlast.UpstreamState) (func(string, outlast.UpstreamState, outlast.UpstreamState, time.Time), <-chan time.Time) {
	c := make(chan time.Time, 1)
	return func(_ string, _, s outlast.UpstreamState, at time.Time) {
		if s == to {
			select {
			case c <- at:
			default:
			}
		}
	}, c
}

// patient is a policy that outlasts a long outage: many attempts, short
// waits, a small reserve.
func patient() *outlast.Policy {
	return &outlast.Policy{Waits: []time.Duration{500 * time.Millisecond}, Reserve: time.Second}
}

// A key is marked down after DownAfter outage failures in a row, and not
// before; a success in between starts the count again.
func TestAdmissionDownAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &outlast.Admission{}
		f := newFake(step{err: errRefused}, step{err: errRefused}, step{}, step{err: errRefused}, step{err: errRefused}, step{err: errRefused})
		tr := &outlast.Transport{Base: f, Admission: a}
		for i, want := range []outlast.UpstreamState{outlast.Healthy, outlast.Healthy, outlast.Healthy, outlast.Healthy, outlast.Healthy, outlast.Down} {
			send1(t.Context(), tr, strconv.Itoa(i))
			if got := a.State("model.test").State; got != want {
				t.Errorf("after attempt %d: state %v, want %v", i+1, got, want)
			}
		}
	})
}

// While the upstream is down, exactly one probe is in flight at a time,
// on the probe schedule, whatever the number of requests that wait; when
// it is back, every request gets through.
func TestAdmissionOneProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		u := &upstream{up: start.Add(30 * time.Second), service: time.Second}
		tr := &outlast.Transport{Base: u, Policy: patient(), Admission: &outlast.Admission{}}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		errs := make([]error, 50)
		for i := range errs {
			wg.Go(func() { errs[i] = send1(ctx, tr, strconv.Itoa(i)) })
			time.Sleep(100 * time.Millisecond) // arrivals over the first 5 s
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("request %d: %v, want success once the upstream is back", i, err)
			}
		}
		if u.downPeak != 1 {
			t.Errorf("while down, the upstream saw %d attempts at once, want 1: one probe", u.downPeak)
		}
		// 3 failures mark it down within the first 0.5 s; then probes
		// at 1, 2 and every 4 s: about 9 in 30 s, far from 50 requests'
		// own retries every 0.5 s.
		if n := u.sentBetween(start, u.up); n > 12 {
			t.Errorf("the upstream saw %d attempts during the 30 s outage, want at most 12 (3 to mark it down, then probes)", n)
		}
		// The first probe after the outage's end goes within 6 s of it:
		// every 4 s, jittered up by as much as half.
		if n := u.sentBetween(u.up, u.up.Add(6*time.Second+time.Millisecond)); n == 0 {
			t.Error("no attempt within 6 s of the upstream's return, want the probe")
		}
	})
}

// A waiting request leaves at once, wrapping ErrUpstreamDown and the
// last failure, when the next chance to send comes after its deadline
// less its reserve; one with time to spare waits and succeeds.
func TestAdmissionFailFast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		u := &upstream{up: start.Add(20 * time.Second), service: time.Second}
		a := &outlast.Admission{ProbeWaits: []time.Duration{10 * time.Second}}
		tr := &outlast.Transport{Base: u, Policy: patient(), Admission: a}
		markDown(t, u, a) // marks it down; the next probe is 10 s away
		s := a.State("model.test")
		if in := time.Until(s.NextProbe); s.State != outlast.Down || in < 10*time.Second || in > 15*time.Second {
			t.Fatalf("state %+v, want down with the next probe in 10 s, jittered up to 15 s", s)
		}
		untilProbe := time.Until(s.NextProbe)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		before := time.Now()
		err := send1(ctx, tr, "short")
		if !errors.Is(err, outlast.ErrUpstreamDown) || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("a 5 s deadline with the probe 10 s away: got %v, want ErrUpstreamDown wrapping the refused connection", err)
		}
		if waited := time.Since(before); waited != 0 {
			t.Errorf("it failed after %v, want at once", waited)
		}
		if c := outlast.Classify(err); c != outlast.ClassDown {
			t.Errorf("Classify = %v, want %v", c, outlast.ClassDown)
		}
		if outlast.IsRetryable(err) {
			t.Error("IsRetryable(ErrUpstreamDown) = true, want false: waiting was judged not to fit")
		}
		// A request whose deadline, less its 1 s reserve, fits the probe
		// waits for it and is the probe: it fails, and the next probe,
		// 10 s or more later, is past its deadline, so it leaves at
		// once, having made that one attempt: a paced retry has no wait
		// of its own to idle through first.
		ctx2, cancel2 := context.WithTimeout(t.Context(), untilProbe+2*time.Second)
		defer cancel2()
		before = time.Now()
		err = send1(ctx2, tr, "medium")
		if !errors.Is(err, outlast.ErrUpstreamDown) {
			t.Errorf("a 15 s deadline: got %v, want ErrUpstreamDown once the probe at 10 s failed", err)
		}
		if waited := time.Since(before); waited != untilProbe {
			t.Errorf("it left after %v, want %v: at the failed probe", waited, untilProbe)
		}
		ctx3, cancel3 := context.WithTimeout(t.Context(), time.Minute)
		defer cancel3()
		if err := send1(ctx3, tr, "long"); err != nil {
			t.Errorf("a 1 min deadline: %v, want success at the probe after the outage", err)
		}
	})
}

// A Retry-After on a 429 or 503 holds the whole key: no request is sent
// before it, and then one probe goes.
func TestAdmissionNotBefore(t *testing.T) {
	for _, status := range []int{429, 503} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				u := &upstream{up: start.Add(25 * time.Second), service: time.Second, status: status, header: map[string]string{"Retry-After": "10"}}
				a := &outlast.Admission{}
				tr := &outlast.Transport{Base: u, Policy: patient(), Admission: a}
				if err := send1(t.Context(), &outlast.Transport{Base: u, Admission: a}, "first"); err == nil {
					t.Fatal("the first request succeeded, want the status")
				}
				sendAll(t, tr, 5, time.Minute)
				if n := u.sentBetween(start.Add(time.Nanosecond), start.Add(10*time.Second)); n != 0 {
					t.Errorf("%d attempts before the 10 s the server asked for, want none", n)
				}
				if n := u.sentBetween(start.Add(10*time.Second), start.Add(11*time.Second+time.Millisecond)); n != 1 {
					t.Errorf("%d attempts in the second after the delay (jittered up by a tenth), want 1: the probe", n)
				}
				// Each failed probe's delay holds the next one back, past
				// the probe schedule's 2 s and 4 s.
				u.mu.Lock()
				for i := 1; i < len(u.sent) && u.sent[i].Before(u.up); i++ {
					if gap := u.sent[i].Sub(u.sent[i-1]); gap < 10*time.Second {
						t.Errorf("attempt %d went %v after the one before, whose server asked for 10 s", i+1, gap)
					}
				}
				u.mu.Unlock()
			})
		})
	}
}

// A short delay (at most ShortDelay) is a healthy key's request's own to
// wait out, but the failure that named it may put the key down: the key's
// probe then waits for that delay too, not for the probe schedule's
// first, shorter wait (admission.md, rule 5).
func TestAdmissionShortDelayThatPutsKeyDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		u := &upstream{up: start.Add(time.Minute), status: 529, header: map[string]string{"Retry-After": "5"}}
		a := &outlast.Admission{}
		// Three attempts before the key is down, as DownAfter says; each
		// waits out the server's 5 s, none of them its policy's.
		tr := &outlast.Transport{Base: u, Admission: a, Policy: &outlast.Policy{MaxAttempts: 3, Waits: ms(100), Reserve: time.Second}}
		if err := sendBy(t, tr, "first", start.Add(10*time.Minute)); err == nil {
			t.Fatal("the request succeeded, want the 529")
		}
		u.mu.Lock()
		sent := slices.Clone(u.sent)
		u.mu.Unlock()
		if len(sent) != 3 || sent[1].Sub(sent[0]) != 5*time.Second || sent[2].Sub(sent[1]) != 5*time.Second {
			t.Fatalf("attempts at %v, want three, 5 s apart", sent)
		}
		down := sent[2]
		st := a.State("model.test")
		if st.State != outlast.Down {
			t.Fatalf("after three 529s the key is %v, want down", st.State)
		}
		if st.NotBefore.Before(down.Add(5 * time.Second)) {
			t.Errorf("the key is held until %v after the last 529, want at least the server's 5 s", st.NotBefore.Sub(down))
		}
		// The probe, another request's attempt, goes at the not-before
		// time, not a second after the key went down.
		if err := sendBy(t, &outlast.Transport{Base: u, Admission: a, Policy: patient()}, "next", start.Add(20*time.Second)); err == nil {
			t.Fatal("the next request succeeded during the outage")
		}
		if n := u.sentBetween(down.Add(time.Nanosecond), down.Add(5*time.Second)); n != 0 {
			t.Errorf("%d attempts within the 5 s the last 529 asked for, want none", n)
		}
	})
}

// A server's delay holds the key for the delay plus a random part of a
// tenth of it, or of DelaySpread, at most half the delay: never earlier,
// and spread across keys over the whole of that part.
func TestAdmissionDelaySpread(t *testing.T) {
	for _, c := range []struct {
		name         string
		spread       time.Duration
		retryAfter   string
		delay, width time.Duration
	}{
		{"default", 0, "10", 10 * time.Second, time.Second},
		{"set", 4 * time.Second, "10", 10 * time.Second, 4 * time.Second},
		{"capped at half the delay", 8 * time.Second, "8", 8 * time.Second, 4 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := &outlast.Admission{DelaySpread: c.spread}
				tr := &outlast.Transport{
					Base:         newFake(step{status: 503, header: map[string]string{"Retry-After": c.retryAfter}}),
					Admission:    a,
					AdmissionKey: func(r *http.Request) string { return r.Header.Get("X-Id") },
				}
				start := time.Now()
				lo, hi := time.Duration(math.MaxInt64), time.Duration(0)
				for i := range 200 {
					key := strconv.Itoa(i)
					if err := send1(t.Context(), tr, key); err == nil {
						t.Fatal("a 503 succeeded")
					}
					nb := a.State(key).NotBefore.Sub(start)
					lo, hi = min(lo, nb), max(hi, nb)
				}
				if lo < c.delay || hi > c.delay+c.width {
					t.Errorf("not-before times from %v to %v, want within %v to %v", lo, hi, c.delay, c.delay+c.width)
				}
				// 200 uniform draws cover the spread: missing either
				// quarter at its ends has odds of 2 × 0.75^200.
				if lo > c.delay+c.width/4 || hi < c.delay+c.width*3/4 {
					t.Errorf("not-before times from %v to %v, want them spread over %v to %v", lo, hi, c.delay, c.delay+c.width)
				}
			})
		})
	}
}

// Waiters are sent in the order their requests arrived, and recovery
// starts with 2 in flight, growing while attempts succeed, up to
// MaxLimit, where the key is healthy again.
func TestAdmissionPacedRecovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		u := &upstream{up: start.Add(10 * time.Second), service: time.Second}
		var changes []stateChange
		var mu sync.Mutex
		a := &outlast.Admission{MaxLimit: 8, OnState: func(key string, from, to outlast.UpstreamState, at time.Time) {
			mu.Lock()
			changes = append(changes, stateChange{from, to, at})
			mu.Unlock()
		}}
		markDown(t, u, a)
		tr := &outlast.Transport{Base: u, Policy: patient(), Admission: a}
		var wg sync.WaitGroup
		for i := range 30 {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
				defer cancel()
				if err := send1(ctx, tr, fmt.Sprintf("%02d", i)); err != nil {
					t.Errorf("request %d: %v", i, err)
				}
			})
			synctest.Wait() // each has queued before the next arrives
		}
		wg.Wait()
		// After the probe (the first waiter), the rest go in arrival
		// order: those granted at one instant start in any order, but
		// each of them arrived after every one granted before it.
		u.mu.Lock()
		prevMax, curMax, cur := "", "", time.Time{}
		for i, id := range u.order {
			if len(id) != 2 {
				continue
			}
			if at := u.sent[i]; !at.Equal(cur) {
				prevMax, cur = max(prevMax, curMax), at
			}
			if id < prevMax && id != "00" {
				t.Errorf("request %s sent at %v, after request %s that arrived later", id, u.sent[i].Sub(start), prevMax)
			}
			curMax = max(curMax, id)
		}
		u.mu.Unlock()
		if u.peak > 8 {
			t.Errorf("peak in flight %d, want at most MaxLimit 8", u.peak)
		}
		// The probe succeeds at the first probe time after 10 s; the
		// next round holds 2, not the whole queue, half a round trip
		// apart.
		probeAt := u.firstSentFrom(u.up)
		if n := u.sentBetween(probeAt, probeAt.Add(1500*time.Millisecond+time.Millisecond)); n != 3 {
			t.Errorf("%d attempts in the 1.5 s from the probe, want 3: the probe, then 2 paced 0.5 s apart once it succeeds", n)
		}
		if s := a.State("model.test"); s.State != outlast.Healthy {
			t.Errorf("after the backlog: %+v, want healthy", s)
		}
		mu.Lock()
		defer mu.Unlock()
		// Changes made by different goroutines may be told out of
		// order: their times order them, and at one instant each
		// change follows from the one before.
		states := inOrder(changes)
		// Probes after 1, 2 and then 4 s, each jittered up by as much
		// as half; the upstream is back at 10 s: 3 or 4 probes.
		want3 := []string{"down", "probing", "down", "probing", "down", "probing", "recovering", "healthy"}
		want4 := []string{"down", "probing", "down", "probing", "down", "probing", "down", "probing", "recovering", "healthy"}
		if !slices.Equal(states, want3) && !slices.Equal(states, want4) {
			t.Errorf("states %v, want %v or %v", states, want3, want4)
		}
	})
}

// stateChange is one call of OnState.
type stateChange struct {
	from, to outlast.UpstreamState
	at       time.Time
}

// inOrder returns the states changed to, in the order of the changes:
// by their times, and among those of one instant, each after the change
// whose state it leaves.
func inOrder(changes []stateChange) []string {
	c := slices.Clone(changes)
	slices.SortStableFunc(c, func(x, y stateChange) int { return x.at.Compare(y.at) })
	for i := 1; i < len(c); i++ {
		for j := i + 1; c[i].from != c[i-1].to && j < len(c) && c[j].at.Equal(c[i].at); j++ {
			if c[j].from == c[i-1].to {
				c[i], c[j] = c[j], c[i]
			}
		}
	}
	out := make([]string, len(c))
	for i, x := range c {
		out[i] = x.to.String()
	}
	return out
}

// The queue is bounded, and a waiter that gives up leaves it, passing its
// turn on: the next waiter probes.
func TestAdmissionQueueAndCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		u := &upstream{up: start.Add(5 * time.Second), service: time.Second}
		a := &outlast.Admission{MaxQueue: 2}
		markDown(t, u, a)
		tr := &outlast.Transport{Base: u, Admission: a}
		quitter, quit := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		var quitErr, stayErr error
		wg.Go(func() { quitErr = send1(quitter, tr, "quitter") })
		synctest.Wait()
		wg.Go(func() { stayErr = send1(t.Context(), tr, "stayer") })
		synctest.Wait()
		if err := send1(t.Context(), tr, "third"); !errors.Is(err, outlast.ErrBusy) {
			t.Errorf("a third waiter with MaxQueue 2: %v, want ErrBusy", err)
		}
		if s := a.State("model.test"); s.Waiting != 2 {
			t.Errorf("waiting %d, want 2", s.Waiting)
		}
		quit()
		synctest.Wait()
		if s := a.State("model.test"); s.Waiting != 1 {
			t.Errorf("after a waiter gave up: waiting %d, want 1", s.Waiting)
		}
		wg.Wait()
		if !errors.Is(quitErr, context.Canceled) {
			t.Errorf("the waiter that gave up: %v, want context.Canceled", quitErr)
		}
		// Without a policy, the stayer's one attempt is the probe at 1 s,
		// which fails: the upstream is back only at 5 s.
		if !errors.Is(stayErr, syscall.ECONNREFUSED) {
			t.Errorf("the waiter that stayed: %v, want the probe's refused connection", stayErr)
		}
		if got := u.sentBetween(start.Add(time.Nanosecond), u.up); got != 1 {
			t.Errorf("%d attempts while down after the marking, want 1: the stayer's probe", got)
		}
	})
}

// While every key is healthy, an Admission costs no allocation.
func TestAdmissionHealthyAllocations(t *testing.T) {
	resp := &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}}
	base := roundTripFunc(func(*http.Request) (*http.Response, error) { return resp, nil })
	req, _ := http.NewRequest(http.MethodPost, "http://model.test/v1/chat/completions", nil)
	for i := range 12 {
		req.Header.Set(fmt.Sprintf("X-Header-%d", i), "v")
	}
	without := &outlast.Transport{Base: base, Policy: &outlast.Policy{Waits: ms(1)}}
	with := &outlast.Transport{Base: base, Policy: &outlast.Policy{Waits: ms(1)}, Admission: &outlast.Admission{}}
	a := testing.AllocsPerRun(100, func() { without.RoundTrip(req) })
	b := testing.AllocsPerRun(100, func() { with.RoundTrip(req) })
	if b != a {
		t.Errorf("with an Admission, all healthy: %v allocations a request, want %v as without", b, a)
	}
}

// A success that says no request is left until its limit resets holds the
// key until then, before any 429: OpenAI's duration and Anthropic's time.
func TestAdmissionPacesOnRateLimitHeaders(t *testing.T) {
	for _, c := range []struct {
		name   string
		header func(now time.Time) map[string]string
	}{
		{"openai", func(time.Time) map[string]string {
			return map[string]string{"X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Reset-Requests": "6s"}
		}},
		{"anthropic", func(now time.Time) map[string]string {
			return map[string]string{"Anthropic-Ratelimit-Requests-Remaining": "0", "Anthropic-Ratelimit-Requests-Reset": now.Add(6 * time.Second).Format(time.RFC3339)}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFake(step{header: c.header(time.Now())}, step{})
				tr := &outlast.Transport{Base: f, Admission: &outlast.Admission{}}
				start := time.Now()
				for i := range 3 {
					if err := send1(t.Context(), tr, strconv.Itoa(i)); err != nil {
						t.Fatalf("request %d: %v", i, err)
					}
				}
				at := f.attempts()
				if len(at) != 3 || at[0].at != start {
					t.Fatalf("attempts %v, want 3, the first at once", at)
				}
				// The reset is jittered up by at most a tenth.
				if d := at[1].at.Sub(start); d < 6*time.Second || d > 6600*time.Millisecond {
					t.Errorf("the second request went after %v, want at the reset, 6 s (to 6.6 s)", d)
				}
				if at[2].at != at[1].at {
					t.Errorf("the third went %v after the second, want at once: the limit is reset", at[2].at.Sub(at[1].at))
				}
			})
		})
	}
}

// A 429 that the key cannot answer with a smaller limit puts it down
// again: the probe's, which says the upstream is back but full, or one at
// a limit of 1. The next probe waits as after a failed probe, so that a
// client at one request at a time does not keep a full upstream full of
// its 429s.
func TestAdmissionFullAtOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refused := step{err: errRefused}
		busy := step{status: 429}
		f := newFake(refused, refused, refused, busy, step{}, busy, step{})
		a := &outlast.Admission{ProbeWaits: []time.Duration{time.Second, 4 * time.Second}, MaxLimit: 1}
		markDown(t, f, a)
		tr := &outlast.Transport{Base: f, Admission: a, Policy: patient()}
		// r is the probe; s waits behind it, and so keeps the key
		// recovering at its limit of 1 once a probe is answered.
		var wg sync.WaitGroup
		goAndWait(t, &wg, tr, "r")
		goAndWait(t, &wg, tr, "s")
		wg.Wait()
		at := f.attempts()
		if len(at) != 7 {
			t.Fatalf("%d attempts, want 7: 3 refused, r's probe's 429, r's second probe, s's 429 at a limit of 1, s's probe", len(at))
		}
		if d := at[4].at.Sub(at[3].at); d < 4*time.Second || d > 6*time.Second {
			t.Errorf("the probe after the probe's 429 went %v after it, want the second probe wait, 4 s to 6 s", d)
		}
		if d := at[6].at.Sub(at[5].at); d < time.Second || d > 1500*time.Millisecond {
			t.Errorf("the probe after a 429 at a limit of 1 went %v after it, want the first probe wait, 1 s to 1.5 s", d)
		}
	})
}

// With a retry budget, retries stop once failures have spent half the
// bucket, for every request of the key, and first attempts still go; a
// success refills it by RetryBudget.
func TestAdmissionRetryBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(step{status: 503})
		a := &outlast.Admission{RetryBudget: 0.1, DownAfter: 1 << 30} // the budget alone, never down
		tr := &outlast.Transport{Base: f, Policy: &outlast.Policy{Waits: ms(10, 10, 10, 10), MaxAttempts: 5}, Admission: a}
		var refused int
		for i := range 20 {
			err := send1(t.Context(), tr, strconv.Itoa(i))
			if errors.Is(err, outlast.ErrRetryBudget) {
				refused++
				if outlast.IsRetryable(err) || outlast.Classify(err) != outlast.ClassDown {
					t.Errorf("request %d: %v is retryable or not upstream_down", i, err)
				}
			}
		}
		// 5 failures spend half the 10 tokens: the first request makes
		// its 5 attempts, then each of the other 19 its first only.
		if n := len(f.attempts()); n != 5+19 {
			t.Errorf("%d attempts, want 24: without the budget, 100", n)
		}
		if refused != 19 {
			t.Errorf("%d requests refused a retry, want 19", refused)
		}
	})
}

// A recovering key starts at a quarter of MaxLimit in flight, its grants
// paced a round trip over the limit apart, and each success adds half a
// request to the limit.
func TestAdmissionRecoveryStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		u := &upstream{up: start.Add(500 * time.Millisecond), service: time.Second}
		onState, recovered := firstChange(outlast.Recovering)
		a := &outlast.Admission{MaxLimit: 40, OnState: onState}
		markDown(t, u, a)
		tr := &outlast.Transport{Base: u, Policy: patient(), Admission: a}
		done := make(chan struct{})
		go func() { sendAll(t, tr, 60, time.Minute); close(done) }()
		answered := <-recovered // the probe's answer, 1 s after it went
		// By 1.95 s later the first round's 10 have succeeded, and none
		// of the next: 10 + 10 × 0.5.
		time.Sleep(time.Until(answered.Add(1950 * time.Millisecond)))
		if s := a.State("model.test"); s.Limit != 15 {
			t.Errorf("limit %d after the first round's 10 successes, want 15", s.Limit)
		}
		<-done
		// The first round: a quarter of 40, paced 1 s / 10 apart.
		u.mu.Lock()
		var round []time.Time
		for _, at := range u.sent {
			if !at.Before(answered) && at.Before(answered.Add(time.Second)) {
				round = append(round, at)
			}
		}
		u.mu.Unlock()
		if len(round) != 10 {
			t.Fatalf("%d attempts in the round trip after the probe's answer, want 10: a quarter of MaxLimit 40", len(round))
		}
		for i, at := range round {
			if want := answered.Add(time.Duration(i) * 100 * time.Millisecond); !at.Equal(want) {
				t.Errorf("attempt %d of the first round went %v after the probe's answer, want %v: paced 100 ms apart", i+1, at.Sub(answered), want.Sub(answered))
			}
		}
	})
}

// Failed attempts that a troubled key's Admission let through count
// against MaxAttempts but do not advance the request's waits: the
// Admission spaces the key's attempts, and a request that probed for
// everyone would otherwise reach waits too long for its deadline.
func TestAdmissionAttemptsKeepWaits(t *testing.T) {
	for _, c := range []struct {
		name     string
		policy   *outlast.Policy
		refused  bool // the request fails with the last probe's refused connection
		attempts int
	}{
		// Two failed probes, then the third succeeds: without the rule
		// the second failure's wait, 10 min, would not fit the minute.
		{"waits", &outlast.Policy{Waits: []time.Duration{100 * time.Millisecond, 10 * time.Minute}, Reserve: -1}, false, 6},
		{"MaxAttempts 2", &outlast.Policy{Waits: []time.Duration{100 * time.Millisecond}, MaxAttempts: 2, Reserve: -1}, true, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				refused := step{err: errRefused}
				f := newFake(refused, refused, refused, refused, refused, step{})
				a := &outlast.Admission{ProbeWaits: []time.Duration{time.Second}}
				markDown(t, f, a)
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				err := send1(ctx, &outlast.Transport{Base: f, Admission: a, Policy: c.policy}, "r")
				if got := errors.Is(err, syscall.ECONNREFUSED); got != c.refused || !got && err != nil {
					t.Errorf("got %v, want refused %v", err, c.refused)
				}
				if n := len(f.attempts()); n != c.attempts {
					t.Errorf("%d attempts, want %d: 3 to mark the key down, then probes", n, c.attempts)
				}
			})
		})
	}
}

// A request at its deadline less its reserve goes ahead of the pace, though
// not of the limit: the bound is the latest it may be sent.
func TestAdmissionBoundAheadOfPace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		u := &upstream{up: start.Add(500 * time.Millisecond), service: 10 * time.Second}
		onState, probing := firstChange(outlast.Probing)
		a := &outlast.Admission{MaxLimit: 4, OnState: onState}
		markDown(t, u, a)
		tr := &outlast.Transport{Base: u, Policy: patient(), Admission: a}
		var wg sync.WaitGroup
		for _, id := range []string{"probe", "first"} {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
				defer cancel()
				if err := send1(ctx, tr, id); err != nil {
					t.Errorf("%s: %v", id, err)
				}
			})
			synctest.Wait()
		}
		// The probe is answered 10 s after it went: the first waiter
		// goes then, and the pace (10 s over a limit of 2) holds the
		// next until 5 s later. This one's bound is 1 s after the
		// answer (its deadline less the policy's 1 s reserve).
		answered := (<-probing).Add(10 * time.Second)
		ctx, cancel := context.WithDeadline(t.Context(), answered.Add(2*time.Second))
		defer cancel()
		// Sent at its bound, its attempt cannot finish in the second
		// left: it ends with its deadline, not sent away.
		if err := send1(ctx, tr, "bound"); errors.Is(err, outlast.ErrUpstreamDown) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("the request with its bound 1 s after the probe's answer: %v, want its deadline, having been sent at its bound ahead of the pace", err)
		}
		wg.Wait()
		if at := u.firstSentFrom(answered.Add(time.Millisecond)); !at.Equal(answered.Add(time.Second)) {
			t.Errorf("the attempt after the first waiter's went %v after the probe's answer, want 1 s: at the third request's bound", at.Sub(answered))
		}
	})
}

// At its deadline less its reserve, the latest it may be sent, a waiter
// of a recovering key goes: past the limit and ahead of waiters that
// have time left, since its
// reserve is for this last attempt and the upstream is answering. A down
// or probing key, whose one attempt in flight is the probe, sends it
// away instead.
func TestAdmissionLastChance(t *testing.T) {
	refused := step{err: errRefused}
	t.Run("past the limit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// The probe is answered in 1 s; the two sent under the
			// first limit, 2 of MaxLimit 8, take 10 s each.
			f := newFake(refused, refused, refused, step{delay: time.Second}, step{delay: 10 * time.Second}, step{delay: 10 * time.Second}, step{})
			onState, recovering := firstChange(outlast.Recovering)
			a := &outlast.Admission{ProbeWaits: []time.Duration{time.Second}, MaxLimit: 8, OnState: onState}
			markDown(t, f, a)
			tr := &outlast.Transport{Base: f, Policy: patient(), Admission: a}
			var wg sync.WaitGroup
			for _, id := range []string{"probe", "a", "b"} {
				goAndWait(t, &wg, tr, id)
			}
			time.Sleep(time.Until((<-recovering).Add(time.Second)))
			synctest.Wait()
			if s := a.State("model.test"); s.State != outlast.Recovering || s.InFlight != s.Limit {
				t.Errorf("state %+v, want recovering with its limit in flight", s)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			defer cancel()
			bound := time.Now().Add(2 * time.Second) // less patient's 1 s reserve
			if err := send1(ctx, tr, "last"); err != nil {
				t.Errorf("a waiter at its bound with the limit in flight: %v, want sent past the limit and answered", err)
			}
			if at := f.attempts(); len(at) != 7 || !at[6].at.Equal(bound) {
				t.Errorf("attempts %v, want the seventh sent at its bound, %v", at, bound)
			}
			wg.Wait()
		})
	})
	t.Run("past the queue", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// The two sent under the first limit, 2, take 10 s; front
			// waits behind them with a minute's deadline.
			f := newFake(refused, refused, refused, step{delay: time.Second}, step{delay: 10 * time.Second}, step{delay: 10 * time.Second}, step{}, step{})
			onState, recovering := firstChange(outlast.Recovering)
			a := &outlast.Admission{ProbeWaits: []time.Duration{time.Second}, MaxLimit: 8, OnState: onState}
			markDown(t, f, a)
			tr := &outlast.Transport{Base: f, Policy: patient(), Admission: a}
			var wg sync.WaitGroup
			for _, id := range []string{"probe", "a", "b"} {
				goAndWait(t, &wg, tr, id)
			}
			<-recovering
			goAndWait(t, &wg, tr, "front")
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			defer cancel()
			bound := time.Now().Add(2 * time.Second)
			if err := send1(ctx, tr, "last"); err != nil {
				t.Errorf("a waiter at its bound behind another: %v, want sent at its bound", err)
			}
			if at := f.attempts(); len(at) != 7 || !at[6].at.Equal(bound) {
				t.Errorf("attempts %v, want the seventh, last's, at its bound %v, ahead of front", at, bound)
			}
			wg.Wait()
		})
	})
	t.Run("not while probing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFake(refused, refused, refused, step{delay: 10 * time.Second})
			onState, probing := firstChange(outlast.Probing)
			a := &outlast.Admission{ProbeWaits: []time.Duration{time.Second}, OnState: onState}
			markDown(t, f, a)
			tr := &outlast.Transport{Base: f, Policy: patient(), Admission: a}
			var wg sync.WaitGroup
			goAndWait(t, &wg, tr, "probe")
			sent := <-probing
			ctx, cancel := context.WithDeadline(t.Context(), sent.Add(3*time.Second))
			defer cancel()
			err := send1(ctx, tr, "other")
			if !errors.Is(err, outlast.ErrUpstreamDown) || !time.Now().Equal(sent.Add(2*time.Second)) {
				t.Errorf("a waiter at its bound while the probe is out: %v at %v, want ErrUpstreamDown at its bound, %v", err, time.Now(), sent.Add(2*time.Second))
			}
			if n := len(f.attempts()); n != 4 {
				t.Errorf("%d attempts, want 4: the probe alone past the three that marked it down", n)
			}
			wg.Wait()
		})
	})
}

// A request that waits for a down key is told its place once, as at the
// gate: how many wait ahead of it when it joins the queue.
func TestAdmissionQueuedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u := &upstream{up: time.Now().Add(500 * time.Millisecond), service: time.Second}
		a := &outlast.Admission{ProbeWaits: []time.Duration{time.Second}}
		markDown(t, u, a)
		tr := &outlast.Transport{Base: u, Policy: patient(), Admission: a}
		var mu sync.Mutex
		told := map[string][]int{}
		var wg sync.WaitGroup
		for _, id := range []string{"a", "b", "c"} {
			ctx := outlast.WithHooks(t.Context(), outlast.Hooks{Queued: func(_ string, ahead int) {
				mu.Lock()
				told[id] = append(told[id], ahead)
				mu.Unlock()
			}})
			wg.Go(func() {
				if err := send1(ctx, tr, id); err != nil {
					t.Errorf("%s: %v", id, err)
				}
			})
			synctest.Wait()
		}
		wg.Wait()
		for i, id := range []string{"a", "b", "c"} {
			if got := told[id]; len(got) != 1 || got[0] != i {
				t.Errorf("request %s was told %v, want once: [%d]", id, got, i)
			}
		}
	})
}

// A retry after a server's delay that the Admission does not hold the
// key for (it takes a delay only on a 429, 503 or 529) still waits that
// delay itself, unless its policy ignores the delay.
func TestAdmissionDelayNotHeld(t *testing.T) {
	for _, c := range []struct {
		name       string
		mode       outlast.RetryAfterMode
		retryAfter string
		atLeast    time.Duration // the least time from the 502 to the retry
	}{
		{"at least", outlast.RetryAfterAtLeast, "10", 10 * time.Second},
		// Past the 30 s deadline: a policy that ignores it retries all
		// the same.
		{"ignored", outlast.RetryAfterIgnore, "60", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFake(step{err: errRefused}, step{err: errRefused}, step{err: errRefused}, step{status: 502, header: map[string]string{"Retry-After": c.retryAfter}}, step{})
				a := &outlast.Admission{ProbeWaits: []time.Duration{time.Second}}
				markDown(t, f, a)
				p := &outlast.Policy{Waits: []time.Duration{500 * time.Millisecond}, Reserve: time.Second, RetryAfter: c.mode}
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				if err := send1(ctx, &outlast.Transport{Base: f, Policy: p, Admission: a}, "r"); err != nil {
					t.Fatalf("%v, want success after the 502", err)
				}
				at := f.attempts()
				if len(at) != 5 || at[4].at.Sub(at[3].at) < c.atLeast {
					t.Errorf("attempts %v: the retry went %v after the 502 with Retry-After: %s, want at least %v", at, at[len(at)-1].at.Sub(at[3].at), c.retryAfter, c.atLeast)
				}
			})
		})
	}
}

// A policy that ignores a server's delay does not give up on it when the
// key holds it: the Admission, whose not-before time it is, sends the
// retry away, with ErrUpstreamDown, when that time is past its bound.
func TestAdmissionIgnoredDelayHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(step{err: errRefused}, step{err: errRefused}, step{err: errRefused}, step{status: 503, header: map[string]string{"Retry-After": "60"}}, step{})
		a := &outlast.Admission{ProbeWaits: []time.Duration{time.Second}}
		markDown(t, f, a)
		p := &outlast.Policy{Waits: []time.Duration{500 * time.Millisecond}, Reserve: time.Second, RetryAfter: outlast.RetryAfterIgnore}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		err := send1(ctx, &outlast.Transport{Base: f, Policy: p, Admission: a}, "r")
		if !errors.Is(err, outlast.ErrUpstreamDown) || len(f.attempts()) != 4 {
			t.Errorf("%v after %d attempts, want ErrUpstreamDown after the probe's 503: its 60 s delay is the key's, past the 30 s deadline", err, len(f.attempts()))
		}
	})
}

// A failure that says the upstream is up (here a 408) on a recovering key
// is retried after the request's own wait: the Admission spaces outage
// failures, 429s and a server's delays, with probes, a smaller limit and
// holds, but nothing else, and a retry with no wait would come straight
// back.
func TestAdmissionAnswerKeepsOwnWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refused := step{err: errRefused}
		// The probe's answer in 10 ms paces grants 5 ms apart: far
		// less than the policy's wait.
		f := newFake(refused, refused, refused, step{delay: 10 * time.Millisecond}, step{delay: 10 * time.Second}, step{status: http.StatusRequestTimeout}, step{})
		a, tr, recovered, wg := recoverWithLong(t, f, 8)
		time.Sleep(time.Until(recovered.Add(time.Second)))
		if s := a.State("model.test"); s.State != outlast.Recovering {
			t.Errorf("state %+v, want recovering, with the long request in flight", s)
		}
		if err := send1(t.Context(), tr, "r"); err != nil {
			t.Errorf("r: %v", err)
		}
		if at := f.attempts(); len(at) != 7 || at[6].at.Sub(at[5].at) != 500*time.Millisecond {
			t.Errorf("attempts %v, want the retry after the 408 the policy's 500ms later", at)
		}
		wg.Wait()
	})
}

// An outage failure on a key that an answer has left healthy (its limit
// at MaxLimit, nobody waiting) is retried after the policy's wait:
// nothing is left to space the retry.
func TestAdmissionNoWaitOnlyWhileTroubled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refused := step{err: errRefused}
		f := newFake(refused, refused, refused,
			step{delay: 10 * time.Millisecond},               // the probe
			step{delay: 100 * time.Millisecond},              // long, whose answer leaves the key healthy
			step{status: 500, delay: 200 * time.Millisecond}, // r, answered after long is done
			step{}) // r's retry
		_, tr, recovered, wg := recoverWithLong(t, f, 2)
		time.Sleep(time.Until(recovered.Add(50 * time.Millisecond)))
		if err := send1(t.Context(), tr, "r"); err != nil {
			t.Errorf("r: %v", err)
		}
		wg.Wait()
		if at := f.attempts(); len(at) != 7 || at[6].at.Sub(at[5].at) != 700*time.Millisecond {
			t.Errorf("attempts %v, want r's retry 700ms after its first attempt: the 500 after 200ms, then the policy's 500ms", at)
		}
	})
}

// At MaxLimit 1 the probe's 429 keeps the key down: its request's retry,
// with nobody else waiting, waits for the next probe rather than finding
// the key healthy.
func TestAdmissionHoldAtMaxLimitOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refused := step{err: errRefused}
		f := newFake(refused, refused, refused, step{status: 429}, step{})
		a := &outlast.Admission{ProbeWaits: []time.Duration{4 * time.Second}, MaxLimit: 1}
		markDown(t, f, a)
		tr := &outlast.Transport{Base: f, Policy: patient(), Admission: a}
		if err := send1(t.Context(), tr, "front"); err != nil {
			t.Fatal(err)
		}
		if at := f.attempts(); len(at) != 5 || at[4].at.Sub(at[3].at) < 4*time.Second {
			t.Errorf("attempts %v, want the retry after the probe's 429 to wait for the next probe, 4 s or more", at)
		}
	})
}

// recoverWithLong marks f's key down for an Admission with maxLimit (at
// least 2) and probe waits of 1 s, then starts two requests, which f's
// script must answer: the probe, whose answer recovers the key at a limit
// of 2, and "long", sent under it, which keeps the key recovering while it
// is in flight. It returns when the key recovered; the caller waits on wg.
func recoverWithLong(t *testing.T, f *fakeRT, maxLimit int) (*outlast.Admission, *outlast.Transport, time.Time, *sync.WaitGroup) {
	t.Helper()
	onState, recovering := firstChange(outlast.Recovering)
	a := &outlast.Admission{ProbeWaits: []time.Duration{time.Second}, MaxLimit: maxLimit, OnState: onState}
	markDown(t, f, a)
	tr := &outlast.Transport{Base: f, Policy: patient(), Admission: a}
	wg := &sync.WaitGroup{}
	for _, id := range []string{"probe", "long"} {
		wg.Go(func() {
			if err := send1(t.Context(), tr, id); err != nil {
				t.Errorf("%s: %v", id, err)
			}
		})
		synctest.Wait()
	}
	return a, tr, <-recovering, wg
}

// goAndWait starts a request through tr with a minute's deadline, which
// it must meet, and waits until every goroutine of the bubble is blocked.
func goAndWait(t *testing.T, wg *sync.WaitGroup, tr http.RoundTripper, id string) {
	t.Helper()
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if err := send1(ctx, tr, id); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	})
	synctest.Wait()
}

// phasedRT answers by the time since its start: each phase's status and
// headers until the phase ends, and 200 after the last. It records when
// each attempt came.
type phasedRT struct {
	start  time.Time
	phases []outagePhase

	mu   sync.Mutex // guards sent
	sent []time.Time
}

type outagePhase struct {
	until  time.Duration
	status int
	header map[string]string
}

func (p *phasedRT) RoundTrip(r *http.Request) (*http.Response, error) {
	now := time.Now()
	p.mu.Lock()
	p.sent = append(p.sent, now)
	p.mu.Unlock()
	status, h := http.StatusOK, http.Header{}
	for _, ph := range p.phases {
		if now.Sub(p.start) < ph.until {
			status = ph.status
			for k, v := range ph.header {
				h.Set(k, v)
			}
			break
		}
	}
	return &http.Response{StatusCode: status, Header: h, Body: http.NoBody, Request: r}, nil
}

// A lone request whose own failures mark its key down follows the key's
// recovery, its probes and the server's not-before time, not its own
// long waits, even though its attempts went while the key was healthy:
// through 13 s of 502s and 5 s of 429s with Retry-After: 5, it is
// answered soon after the outage's end, where its own waits of 15 s and
// 45 s would send it at 60 s.
func TestAdmissionLoneRequestFollowsRecovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &phasedRT{start: time.Now(), phases: []outagePhase{
			{until: 13 * time.Second, status: 502},
			{until: 18 * time.Second, status: 429, header: map[string]string{"Retry-After": "5"}},
		}}
		tr := &outlast.Transport{Base: f, Admission: &outlast.Admission{}, Logger: discardLogger(),
			Policy: &outlast.Policy{Waits: []time.Duration{15 * time.Second, 45 * time.Second, 120 * time.Second, 240 * time.Second}, Reserve: 28 * time.Second}}
		start := time.Now()
		if err := sendBy(t, tr, "lone", start.Add(115*time.Second)); err != nil {
			t.Fatalf("%v, want the answer after the outage", err)
		}
		// The probe after the not-before time (18 s to 18.5 s), or at
		// worst the next on the probe schedule: within 10 s of the end.
		if took := time.Since(start); took > 28*time.Second {
			t.Errorf("answered after %v, want within 10s of the outage's end at 18s", took)
		}
	})
}

// One 429 with a Retry-After of years does not hold the key for years:
// the delay is cut to MaxRetryAfter, the attempt's record and the log
// say so, and the key is probed within the bound. A request without a
// deadline, which would otherwise wait for the not-before time, is
// answered by then.
func TestAdmissionServerDelayCut(t *testing.T) {
	for _, c := range []struct {
		name  string
		limit time.Duration // the Transport's MaxRetryAfter
		want  time.Duration // the bound in force
	}{
		// The default bound, 5 minutes.
		{"default", 0, outlast.DefaultMaxRetryAfter},
		// An operator's own.
		{"set", 30 * time.Second, 30 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFake(step{status: 429, header: map[string]string{"Retry-After": "99999999999"}}, step{})
				var rec recorder
				var log strings.Builder
				tr := &outlast.Transport{Base: f, Admission: &outlast.Admission{}, MaxRetryAfter: c.limit, Hooks: rec.hooks(),
					Logger: slog.New(slog.NewTextHandler(&log, nil)), Policy: &outlast.Policy{Waits: ms(100), Reserve: time.Minute}}
				start := time.Now()
				var wg sync.WaitGroup
				wg.Go(func() {
					// A request with no deadline, arriving while the key
					// is held.
					time.Sleep(time.Second)
					if err := send1(t.Context(), tr, "later"); err != nil {
						t.Errorf("later: %v", err)
					}
				})
				if err := sendBy(t, tr, "first", start.Add(9*time.Minute)); err != nil {
					t.Errorf("first: %v, want the answer after the cut delay", err)
				}
				wg.Wait()
				at := f.attempts()
				if len(at) < 2 || at[1].at.Sub(start) != c.want {
					t.Errorf("attempts %v, want the probe %v after the 429", at, c.want)
				}
				if e := rec.ends[0]; !e.RetryAfterCut || e.RetryAfter != c.want {
					t.Errorf("the 429's record: RetryAfter %v, cut %v; want %v, cut", e.RetryAfter, e.RetryAfterCut, c.want)
				}
				if !strings.Contains(log.String(), "the server's delay was cut") {
					t.Errorf("log %q, want a line saying the delay was cut", log.String())
				}
			})
		})
	}
}

// Only the probe's answer ends a down key. An answer to an attempt sent
// while the key was healthy was served before the failures that marked
// it down: it says nothing of whether the upstream is back, and releasing
// the queue on it sends every waiter into the outage.
func TestAdmissionOnlyTheProbeRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refused := step{err: errRefused}
		f := newFake(step{delay: 5 * time.Second}, refused, refused, refused, step{})
		a := &outlast.Admission{}
		tr := &outlast.Transport{Base: f, Admission: a}
		var wg sync.WaitGroup
		wg.Go(func() {
			// Sent while the key is healthy; answered 5 s later.
			if err := send1(t.Context(), tr, "early"); err != nil {
				t.Errorf("early: %v", err)
			}
		})
		synctest.Wait()
		markDown(t, f, a)
		wg.Wait()
		if s := a.State("model.test"); s.State != outlast.Down {
			t.Fatalf("after the early request's answer: %v, want still down", s.State)
		}
		if err := send1(t.Context(), tr, "probe"); err != nil {
			t.Fatalf("probe: %v", err)
		}
		if s := a.State("model.test"); s.State == outlast.Down || s.State == outlast.Probing {
			t.Errorf("after the probe's answer: %v, want recovering or healthy", s.State)
		}
	})
}
