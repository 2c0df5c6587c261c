package outlast_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast"
)

// limited is a fake provider key with OpenAI's limits: requests and
// tokens per window, refilled continuously, each request counted up front
// as its body's estimate. It answers with OpenAI's headers, and 429 with
// Retry-After past a limit.
type limited struct {
	name    string
	reqs    float64 // the request limit a window
	toks    float64 // the token limit a window
	window  time.Duration
	latency time.Duration
	status  int // if not zero, every answer's status (an outage)

	mu         sync.Mutex
	reqLeft    float64
	tokLeft    float64
	at         time.Time
	sent, hits int // requests received, and those answered 429
	order      []string
}

func newLimited(name string, reqs, toks float64) *limited {
	return &limited{name: name, reqs: reqs, toks: toks, window: time.Minute, latency: 100 * time.Millisecond, reqLeft: reqs, tokLeft: toks, at: time.Now()}
}

func (l *limited) RoundTrip(r *http.Request) (*http.Response, error) {
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	cost := float64(outlast.EstimateTokens(body, outlast.DefaultOutputTokens))
	l.mu.Lock()
	now := time.Now()
	el := now.Sub(l.at).Seconds() / l.window.Seconds()
	l.reqLeft, l.tokLeft, l.at = min(l.reqs, l.reqLeft+el*l.reqs), min(l.toks, l.tokLeft+el*l.toks), now
	l.sent++
	l.order = append(l.order, r.Header.Get("X-Id"))
	status := l.status
	if status == 0 {
		status = http.StatusOK
		if l.reqLeft < 1 || l.tokLeft < cost {
			status = http.StatusTooManyRequests
			l.hits++
		} else {
			l.reqLeft--
			l.tokLeft -= cost
		}
	}
	h := http.Header{}
	h.Set("x-ratelimit-limit-requests", strconv.Itoa(int(l.reqs)))
	h.Set("x-ratelimit-remaining-requests", strconv.Itoa(int(math.Floor(l.reqLeft))))
	h.Set("x-ratelimit-reset-requests", l.until(l.reqs-l.reqLeft, l.reqs).String())
	h.Set("x-ratelimit-limit-tokens", strconv.Itoa(int(l.toks)))
	h.Set("x-ratelimit-remaining-tokens", strconv.Itoa(int(math.Floor(l.tokLeft))))
	h.Set("x-ratelimit-reset-tokens", l.until(l.toks-l.tokLeft, l.toks).String())
	if status == http.StatusTooManyRequests {
		wait := max(l.until(1-l.reqLeft, l.reqs), l.until(cost-l.tokLeft, l.toks))
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
	}
	l.mu.Unlock()
	if status == http.StatusOK {
		d := l.latency
		if v, err := time.ParseDuration(r.Header.Get("X-Latency")); err == nil {
			d = v
		}
		time.Sleep(d)
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(l.name)), Request: r}, nil
}

// until returns how long n of a limit of per a window takes to refill.
func (l *limited) until(n, per float64) time.Duration {
	if n <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(n / per * float64(l.window)))
}

func (l *limited) counts() (sent, hits int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent, l.hits
}

// poolOf makes a Pool over members, each a Transport named by its fake.
func poolOf(p *outlast.Policy, members ...http.RoundTripper) *outlast.Pool {
	pool := &outlast.Pool{Policy: p}
	for _, m := range members {
		name := ""
		if l, ok := m.(*limited); ok {
			name = l.name
		}
		pool.Members = append(pool.Members, &outlast.Transport{Name: name, Base: m})
	}
	return pool
}

// chat is a request of about tokens tokens: a body of the size that
// EstimateTokens counts as its input, and max_tokens for the rest.
func chat(t *testing.T, ctx context.Context, id string, tokens int) *http.Request {
	t.Helper()
	body := fmt.Sprintf(`{"max_tokens":%d}`, 0)
	input := outlast.EstimateTokens([]byte(body), 0)
	body = fmt.Sprintf(`{"max_tokens":%d}`, max(tokens-input, 0))
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://pool.test/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("X-Id", id)
	return r
}

// served sends r through rt and returns the member that answered 200, or
// the error.
func served(rt http.RoundTripper, r *http.Request) (string, error) {
	resp, err := rt.RoundTrip(r)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("status %d", resp.StatusCode)
	}
	return string(b), nil
}

var poolPolicy = &outlast.Policy{Waits: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, Reserve: time.Second}

// A request goes to the member with the largest share of its limits left,
// by its latest headers less what was sent since.
func TestPoolRoutesByHeadroom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newLimited("a", 100, 10000), newLimited("b", 100, 10000)
		pool := poolOf(poolPolicy, a, b)
		ctx := context.Background()
		// Learn both members' limits.
		for i := range 2 {
			if _, err := served(pool, chat(t, ctx, strconv.Itoa(i), 100)); err != nil {
				t.Fatal(err)
			}
		}
		if a.sent != 1 || b.sent != 1 {
			t.Fatalf("sent a=%d b=%d, want one each: in turn among equals", a.sent, b.sent)
		}
		// A large request spends a third of a's tokens; the next ones go
		// to b while b has the larger share left.
		m, err := served(pool, chat(t, ctx, "big", 3500))
		if err != nil {
			t.Fatal(err)
		}
		other := b
		if m == "b" {
			other = a
		}
		for i := range 3 {
			if m, err := served(pool, chat(t, ctx, "s"+strconv.Itoa(i), 100)); err != nil || m != other.name {
				t.Fatalf("small request %d went to %q (%v), want %s, which has the larger share left", i, m, err, other.name)
			}
		}
		st := pool.State(0)
		if st.Name != "a" || !st.Tokens.Known() || !st.Requests.Known() || st.Tokens.Limit != 10000 {
			t.Fatalf("State(0) = %+v, want a's limits known", st)
		}
	})
}

// A request never goes to collect a 429: while no member has room, it
// waits for the earliest, and is served then. The members' Admissions
// leave the pacing to the pool: they do not hold a member whose headers
// say it has no request left until its whole limit is back.
func TestPoolPacesInsteadOf429(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Two members of 2 requests a minute each: one refills in 30 s.
		a, b := newLimited("a", 2, 1e6), newLimited("b", 2, 1e6)
		pool := poolOf(poolPolicy, a, b)
		for _, m := range pool.Members {
			m.Admission = &outlast.Admission{}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for i := range 4 {
			if _, err := served(pool, chat(t, ctx, strconv.Itoa(i), 10)); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range 2 {
			wg.Go(func() { _, errs[i] = served(pool, chat(t, ctx, "w"+strconv.Itoa(i), 10)) })
			synctest.Wait() // each joins the queue before the next
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("request w%d: %v", i, err)
			}
		}
		for _, l := range []*limited{a, b} {
			if _, hits := l.counts(); hits != 0 {
				t.Errorf("%s answered %d 429s, want none: the pool waits for room", l.name, hits)
			}
		}
		if took := time.Since(start); took < 29*time.Second || took > 31*time.Second {
			t.Errorf("the two waited %v, want about 30 s, as one request of each member refills", took)
		}
	})
}

// An answer older than the one that last counted a member's limits does
// not count them again: a long request's answer, which tells of the
// limits as they were when it was taken, comes after those of shorter
// requests sent after it.
func TestPoolOlderAnswerCountsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newLimited("a", 10, 1e6)
		pool := poolOf(nil, a)
		ctx := context.Background()
		if _, err := served(pool, chat(t, ctx, "first", 10)); err != nil {
			t.Fatal(err)
		}
		long := make(chan error)
		go func() {
			r := chat(t, ctx, "long", 10)
			r.Header.Set("X-Latency", "10s")
			_, err := served(pool, r)
			long <- err
		}()
		synctest.Wait()
		for i := range 6 {
			if _, err := served(pool, chat(t, ctx, strconv.Itoa(i), 10)); err != nil {
				t.Fatal(err)
			}
		}
		if err := <-long; err != nil {
			t.Fatal(err)
		}
		a.mu.Lock()
		left := min(a.reqs, a.reqLeft+time.Since(a.at).Minutes()*a.reqs)
		a.mu.Unlock()
		if got := pool.State(0).Requests.Remaining; float64(got) > left {
			t.Errorf("the pool counts %d requests left, the member has %.2f: the long answer counted them again", got, left)
		}
	})
}

// A member whose answer said its limit was whole is still counted down
// by what is sent to it.
func TestPoolCountsAfterAWholeLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		whole := &headerRT{h: http.Header{
			"X-Ratelimit-Limit-Requests":     {"10"},
			"X-Ratelimit-Remaining-Requests": {"10"},
			"X-Ratelimit-Reset-Requests":     {"0s"},
		}}
		pool := &outlast.Pool{Members: []*outlast.Transport{{Base: whole}}}
		if _, err := served(pool, chat(t, context.Background(), "0", 10)); err != nil {
			t.Fatal(err)
		}
		whole.latency = time.Minute
		for i := range 4 {
			go served(pool, chat(t, context.Background(), strconv.Itoa(i), 10))
		}
		synctest.Wait()
		if got := pool.State(0).Requests.Remaining; got != 6 {
			t.Errorf("with 4 sent after an answer that said 10 of 10 were left, the pool counts %d left, want 6", got)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
	})
}

// headerRT answers 200 with its headers after its latency.
type headerRT struct {
	h       http.Header
	latency time.Duration
}

func (h *headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	d := h.latency
	time.Sleep(d)
	return &http.Response{StatusCode: http.StatusOK, Header: h.h.Clone(), Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
}

// A request that would wait past its deadline less its reserve behind
// the requests already waiting is refused at once, with the time until
// the pool has room for it.
func TestPoolRefusesAtOnceBehindTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newLimited("a", 2, 1e6) // a request each 30 s
		pool := poolOf(poolPolicy, a)
		ctx := context.Background()
		for i := range 2 {
			if _, err := served(pool, chat(t, ctx, strconv.Itoa(i), 10)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 3 {
			go served(pool, chat(t, ctx, "w"+strconv.Itoa(i), 10))
			synctest.Wait()
		}
		short, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		start := time.Now()
		_, err := pool.RoundTrip(chat(t, short, "late", 10))
		var se *outlast.StatusError
		if !errors.As(err, &se) || !errors.Is(err, outlast.ErrPoolSpent) {
			t.Fatalf("err = %v, want ErrPoolSpent", err)
		}
		if time.Since(start) != 0 {
			t.Errorf("refused after %v, want at once: three wait ahead, 90 s of refill", time.Since(start))
		}
		if se.RetryAfter < 90*time.Second || se.RetryAfter > 2*time.Minute {
			t.Errorf("RetryAfter %v, want the refill of the three ahead and its own, about 2 min", se.RetryAfter)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
	})
}

// A request may go ahead of one that waits, to a member the waiting one
// does not wait for: it never delays it.
func TestPoolGoesAheadToAnotherMember(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newLimited("a", 1000, 6000), newLimited("b", 1000, 600)
		a.tokLeft, b.tokLeft = 10, 210
		pool := poolOf(poolPolicy, a, b)
		ctx := context.Background()
		for i := range 2 {
			if _, err := served(pool, chat(t, ctx, strconv.Itoa(i), 10)); err != nil {
				t.Fatal(err)
			}
		}
		// a has none left, refilling 100 a second; b has 200 of 600,
		// refilling 10 a second. A request of 900 waits for a, about 9 s.
		start := time.Now()
		big := make(chan string)
		go func() {
			m, err := served(pool, chat(t, ctx, "big", 900))
			if err != nil {
				t.Error(err)
			}
			big <- m
		}()
		synctest.Wait()
		m, err := served(pool, chat(t, ctx, "small", 100))
		if err != nil || m != "b" {
			t.Fatalf("small: served by %q (%v), want b", m, err)
		}
		if took := time.Since(start); took != b.latency {
			t.Errorf("small took %v, want b's latency alone: it does not wait behind big, which waits for a", took)
		}
		if m := <-big; m != "a" {
			t.Errorf("big served by %q, want a", m)
		}
		if took := time.Since(start); took < 8*time.Second || took > 10*time.Second {
			t.Errorf("big took %v, want about 9 s, a's refill", took)
		}
		for _, l := range []*limited{a, b} {
			if _, hits := l.counts(); hits != 0 {
				t.Errorf("%s answered %d 429s", l.name, hits)
			}
		}
	})
}

// Waiting requests are sent in the order they came.
func TestPoolWaitsInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newLimited("a", 1, 1e6)
		pool := poolOf(poolPolicy, a)
		ctx := context.Background()
		if _, err := served(pool, chat(t, ctx, "0", 10)); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range 5 {
			wg.Go(func() {
				if _, err := served(pool, chat(t, ctx, strconv.Itoa(i+1), 10)); err != nil {
					t.Error(err)
				}
			})
			synctest.Wait()
		}
		wg.Wait()
		if got := strings.Join(a.order, ","); got != "0,1,2,3,4,5" {
			t.Errorf("sent in the order %s, want 0,1,2,3,4,5", got)
		}
		if _, hits := a.counts(); hits != 0 {
			t.Errorf("%d 429s, want none", hits)
		}
	})
}

// A 429 at one member is retried at another at once, without its delay.
func TestPool429MovesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newLimited("a", 100, 1e6), newLimited("b", 100, 1e6)
		a.status = http.StatusTooManyRequests // a says nothing of its limits' state but 429
		pool := poolOf(poolPolicy, a, b)
		var moves []string
		pool.OnMove = func(_ *http.Request, from, to int, err error) {
			moves = append(moves, fmt.Sprintf("%d→%d %v", from, to, err))
		}
		start := time.Now()
		m, err := served(pool, chat(t, context.Background(), "x", 10))
		if err != nil || m != "b" {
			t.Fatalf("served by %q (%v), want b", m, err)
		}
		if took := time.Since(start); took != b.latency {
			t.Errorf("took %v, want b's latency alone, %v: no wait after a's 429", took, b.latency)
		}
		if len(moves) != 1 || !strings.HasPrefix(moves[0], "0→1") {
			t.Errorf("moves %q, want one from 0 to 1", moves)
		}
		// a is held for a while: the next request goes to b at once.
		if m, err := served(pool, chat(t, context.Background(), "y", 10)); err != nil || m != "b" {
			t.Fatalf("next served by %q (%v), want b while a cools down", m, err)
		}
		if sent, _ := a.counts(); sent != 1 {
			t.Errorf("a was sent %d requests, want 1", sent)
		}
	})
}

// With every member spent past the request's deadline less its reserve,
// the caller gets, at once, a 429 saying when the first member has room,
// and nothing is sent.
func TestPoolSpentSaysWhen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newLimited("a", 2, 1e6), newLimited("b", 4, 1e6)
		pool := poolOf(poolPolicy, a, b)
		ctx := context.Background()
		for i := range 6 {
			if _, err := served(pool, chat(t, ctx, strconv.Itoa(i), 10)); err != nil {
				t.Fatal(err)
			}
		}
		sentA, _ := a.counts()
		sentB, _ := b.counts()
		short, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		start := time.Now()
		_, err := pool.RoundTrip(chat(t, short, "late", 10))
		var se *outlast.StatusError
		if !errors.As(err, &se) || !errors.Is(err, outlast.ErrPoolSpent) || se.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("err = %v, want a 429 StatusError wrapping ErrPoolSpent", err)
		}
		if time.Since(start) != 0 {
			t.Errorf("answered after %v, want at once", time.Since(start))
		}
		// b refills a request in 15 s, a in 30 s, less the time the six took.
		if se.RetryAfter <= 10*time.Second || se.RetryAfter > 15*time.Second {
			t.Errorf("RetryAfter = %v, want b's refill of one request, under 15 s", se.RetryAfter)
		}
		if s, _ := a.counts(); s != sentA {
			t.Error("a was sent the request")
		}
		if s, _ := b.counts(); s != sentB {
			t.Error("b was sent the request")
		}
		// Sent at that time, it is served without a 429.
		time.Sleep(se.RetryAfter)
		if m, err := served(pool, chat(t, ctx, "then", 10)); err != nil || m != "b" {
			t.Fatalf("after RetryAfter: served by %q (%v), want b", m, err)
		}
	})
}

// What was sent since a member's latest headers is counted against it:
// two requests that each take most of a member's tokens do not both go
// to it.
func TestPoolCountsWhatWasSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newLimited("a", 100, 1000), newLimited("b", 100, 1000)
		a.latency, b.latency = 10*time.Second, 10*time.Second
		pool := poolOf(poolPolicy, a, b)
		ctx := context.Background()
		for i := range 2 {
			if _, err := served(pool, chat(t, ctx, strconv.Itoa(i), 10)); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		got := make([]string, 2)
		for i := range 2 {
			wg.Go(func() { got[i], _ = served(pool, chat(t, ctx, "big"+strconv.Itoa(i), 700)) })
			synctest.Wait()
		}
		wg.Wait()
		if got[0] == got[1] {
			t.Errorf("both large requests went to %s, whose tokens hold one", got[0])
		}
		for _, l := range []*limited{a, b} {
			if _, hits := l.counts(); hits != 0 {
				t.Errorf("%s answered %d 429s", l.name, hits)
			}
		}
	})
}

// Among members that say nothing of their limits, weights share the
// requests out, in turn.
func TestPoolWeights(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newFake(step{}), newFake(step{})
		pool := &outlast.Pool{Members: []*outlast.Transport{{Base: a}, {Base: b}}, Weights: []int{2, 1}}
		for i := range 30 {
			if _, err := served(pool, chat(t, context.Background(), strconv.Itoa(i), 10)); err != nil {
				t.Fatal(err)
			}
		}
		if na, nb := len(a.attempts()), len(b.attempts()); na != 20 || nb != 10 {
			t.Errorf("a took %d, b %d; want 20 and 10 for weights 2 and 1", na, nb)
		}
	})
}

// A member whose Admission holds it down takes no requests but its probe.
func TestPoolSkipsDownMember(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		down := &upstream{up: time.Now().Add(time.Hour), service: time.Second}
		ok := newFake(step{})
		adm := &outlast.Admission{}
		pool := &outlast.Pool{
			Members: []*outlast.Transport{{Name: "down", Base: down, Admission: adm}, {Name: "ok", Base: ok}},
			Policy:  poolPolicy,
		}
		for i := range 20 {
			if _, err := served(pool, chat(t, context.Background(), strconv.Itoa(i), 10)); err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
		}
		if s := adm.State("pool.test").State; s != outlast.Down {
			t.Fatalf("down member's state %v, want down", s)
		}
		// It went down after DefaultDownAfter failures, each retried at
		// ok at once; then only probes, on its schedule, and the 20
		// requests took no time but their own.
		down.mu.Lock()
		n := len(down.sent)
		down.mu.Unlock()
		if n > outlast.DefaultDownAfter+1 {
			t.Errorf("the down member was sent %d requests, want at most %d", n, outlast.DefaultDownAfter+1)
		}
		if n := len(ok.attempts()); n != 20 {
			t.Errorf("ok served %d, want 20", n)
		}
	})
}

// Under a layer that retries already, the pool makes one attempt.
func TestPoolOneAttemptUnderOuterLayer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newFake(step{status: 503}, step{status: 503}, step{})
		b := newFake(step{status: 503}, step{status: 503}, step{})
		pool := &outlast.Pool{Members: []*outlast.Transport{{Base: a}, {Base: b}}, Policy: poolPolicy}
		calls := 0
		err := outlast.Do(context.Background(), &outlast.Policy{Waits: []time.Duration{time.Second}, MaxAttempts: 2}, func(ctx context.Context) error {
			calls++
			resp, err := pool.RoundTrip(chat(t, ctx, "x", 10))
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return &outlast.StatusError{StatusCode: resp.StatusCode}
			}
			return nil
		})
		if err == nil {
			t.Fatal("want the outer layer's last failure")
		}
		if n := len(a.attempts()) + len(b.attempts()); n != 2 || calls != 2 {
			t.Errorf("%d attempts in %d calls, want one a call", n, calls)
		}
	})
}

// A pool without members, or with weights that do not fit them, says so.
func TestPoolRefusesBadWeights(t *testing.T) {
	for _, w := range [][]int{{1}, {1, 0}} {
		pool := &outlast.Pool{Members: []*outlast.Transport{{}, {}}, Weights: w}
		r, _ := http.NewRequest(http.MethodGet, "http://pool.test/", nil)
		if _, err := pool.RoundTrip(r); err == nil || !strings.Contains(err.Error(), "weight") {
			t.Errorf("weights %v: err = %v, want one that names the weights", w, err)
		}
	}
	var empty outlast.Pool
	r, _ := http.NewRequest(http.MethodGet, "http://pool.test/", nil)
	if _, err := empty.RoundTrip(r); err == nil || !strings.Contains(err.Error(), "no members") {
		t.Errorf("no members: err = %v", err)
	}
}

// A member's own Policy is not used: without a policy of its own, the
// pool sends once.
func TestPoolMembersDoNotRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newFake(step{status: 503}, step{})
		pool := &outlast.Pool{Members: []*outlast.Transport{{Base: a, Policy: poolPolicy}}}
		resp, err := pool.RoundTrip(chat(t, context.Background(), "x", 10))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 503 || len(a.attempts()) != 1 {
			t.Errorf("status %d after %d attempts, want the 503 after one", resp.StatusCode, len(a.attempts()))
		}
	})
}

// bucketShare is a PoolShare of one request limit for every member: a
// bucket of limit requests a window, refilled continuously, that Take
// spends; Count only counts its calls.
type bucketShare struct {
	limit  float64
	window time.Duration

	mu     sync.Mutex
	left   float64
	at     time.Time
	ids    int
	counts int
}

func (b *bucketShare) Take(_ context.Context, member string, tokens float64) (string, time.Duration, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if b.at.IsZero() {
		b.left, b.at = b.limit, now
	}
	b.left = min(b.limit, b.left+now.Sub(b.at).Seconds()/b.window.Seconds()*b.limit)
	b.at = now
	if b.left < 1 {
		return "", time.Duration((1 - b.left) / b.limit * float64(b.window)), nil
	}
	b.left--
	b.ids++
	return member + "/" + strconv.Itoa(b.ids), 0, nil
}

func (b *bucketShare) Count(_ context.Context, member, id string, h outlast.Headroom) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if strings.HasPrefix(id, member+"/") && h.Requests.Known() {
		b.counts++
	}
	return nil
}

// Two pools that share their ledgers send to a member no more than its
// limit together: the second is held while the first spent the room,
// rather than sent to collect a 429.
func TestPoolShareSpendsLimitsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newLimited("a", 4, 1e6) // 4 a minute
		share := &bucketShare{limit: 4, window: time.Minute}
		pools := []*outlast.Pool{poolOf(poolPolicy, a), poolOf(poolPolicy, a)}
		for _, p := range pools {
			p.Share = share
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range 8 {
			wg.Go(func() { _, errs[i] = served(pools[i%2], chat(t, ctx, strconv.Itoa(i), 10)) })
			synctest.Wait()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("request %d: %v", i, err)
			}
		}
		if sent, hits := a.counts(); hits != 0 || sent != 8 {
			t.Errorf("the member got %d requests and answered %d 429s; want 8 and none", sent, hits)
		}
		synctest.Wait() // the answers are counted off the callers' time
		share.mu.Lock()
		defer share.mu.Unlock()
		if share.counts != 8 {
			t.Errorf("the share counted %d answers, want 8", share.counts)
		}
	})
}

// scripted answers each request, by its X-Id, with the requests left
// that the test releases for it: the member's own order of admission.
type scripted struct {
	arrived chan string
	release map[string]chan int
}

func (s *scripted) RoundTrip(r *http.Request) (*http.Response, error) {
	id := r.Header.Get("X-Id")
	s.arrived <- id
	left := <-s.release[id]
	h := http.Header{}
	h.Set("x-ratelimit-limit-requests", "10")
	h.Set("x-ratelimit-remaining-requests", strconv.Itoa(left))
	h.Set("x-ratelimit-reset-requests", (time.Duration(10-left) * 6 * time.Second).String())
	return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
}

// Two attempts sent close together may reach the member in the other
// order: the answer of the later, counted last, does not count the
// earlier, which the member took after it, even though the earlier was
// answered, and counted, first.
func TestPoolAnswersOutOfOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &scripted{arrived: make(chan string, 3), release: map[string]chan int{"0": make(chan int, 1), "j": make(chan int, 1), "k": make(chan int, 1)}}
		pool := &outlast.Pool{Members: []*outlast.Transport{{Name: "m", Base: s}}}
		send := func(id string) chan struct{} {
			done := make(chan struct{})
			go func() {
				defer close(done)
				if _, err := served(pool, chat(t, context.Background(), id, 1)); err != nil {
					t.Error(err)
				}
			}()
			<-s.arrived
			return done
		}
		s.release["0"] <- 4
		<-send("0")
		j := send("j")
		time.Sleep(time.Millisecond)
		k := send("k")
		s.release["j"] <- 2 // the member took k, then j; j answers first
		<-j
		s.release["k"] <- 3
		<-k
		if got := pool.State(0).Requests.Remaining; got != 2 {
			t.Errorf("the pool counts %d requests left; the member has 2", got)
		}
	})
}

// A member whose answers state only what is left, as Azure may, without
// a limit or a reset, is counted by it for a window, and then taken as
// whole again: a request larger than what it said is left waits a window
// at most, rather than for ever.
func TestPoolRemainingAloneHoldsForAWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		azure := &headerRT{h: http.Header{"X-Ratelimit-Remaining-Tokens": {"500"}}}
		pool := &outlast.Pool{Members: []*outlast.Transport{{Name: "azure", Base: azure}}, Policy: poolPolicy}
		if _, err := served(pool, chat(t, context.Background(), "0", 10)); err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := pool.RoundTrip(chat(t, short, "big", 1000))
		var se *outlast.StatusError
		if !errors.As(err, &se) || !errors.Is(err, outlast.ErrPoolSpent) || se.RetryAfter <= 0 || se.RetryAfter > time.Minute {
			t.Fatalf("err = %v, want ErrPoolSpent with a RetryAfter within a minute", err)
		}
		start := time.Now()
		long, cancel2 := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel2()
		if _, err := served(pool, chat(t, long, "big", 1000)); err != nil {
			t.Fatalf("with two minutes: %v", err)
		}
		if took := time.Since(start); took > time.Minute {
			t.Errorf("waited %v, want a minute at most", took)
		}
	})
}

// byHost answers 500 for the hosts in bad, and 200 for the others.
type byHost struct {
	mu   sync.Mutex
	bad  map[string]bool
	sent map[string]int
}

func (b *byHost) RoundTrip(r *http.Request) (*http.Response, error) {
	b.mu.Lock()
	b.sent[r.URL.Host]++
	code := 200
	if b.bad[r.URL.Host] {
		code = 500
	}
	b.mu.Unlock()
	return &http.Response{StatusCode: code, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
}

// With a Rewrite that sends each member's requests to its own host, the
// Admission key by default, the pool sees a member that its Admission
// holds down under that key, and sends the other member the requests.
func TestPoolSeesRewrittenMembersDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &byHost{bad: map[string]bool{"a.test": true}, sent: map[string]int{}}
		hosts := []string{"a.test", "b.test"}
		pool := &outlast.Pool{
			Members: []*outlast.Transport{{Name: "a", Base: b, Admission: &outlast.Admission{}}, {Name: "b", Base: b, Admission: &outlast.Admission{}}},
			Rewrite: func(r *http.Request, i int) (*http.Request, error) {
				r.URL.Host, r.Host = hosts[i], hosts[i]
				return r, nil
			},
		}
		refused := 0
		for i := range 40 {
			resp, err := pool.RoundTrip(chat(t, context.Background(), strconv.Itoa(i), 10))
			if errors.Is(err, outlast.ErrUpstreamDown) {
				refused++
			}
			if resp != nil {
				resp.Body.Close()
			}
		}
		if s := pool.Members[0].Admission.State("a.test").State; s != outlast.Down {
			t.Fatalf("a's state under its host %v, want down", s)
		}
		if refused > 0 {
			t.Errorf("%d requests refused as down while b was healthy", refused)
		}
	})
}

// stepsRT answers its requests in turn with the headers of steps, each
// after its delay.
type stepsRT struct {
	mu    sync.Mutex
	n     int
	steps []struct {
		delay time.Duration
		h     http.Header
	}
}

func (s *stepsRT) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	st := s.steps[min(s.n, len(s.steps)-1)]
	s.n++
	s.mu.Unlock()
	time.Sleep(st.delay)
	return &http.Response{StatusCode: http.StatusOK, Header: st.h, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
}

// A waiting request that an answer shows cannot have room before its
// bound is refused then, not when its bound comes.
func TestPoolRefusesAWaiterOnceItCannotBeServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		requests := func(left int, reset string) http.Header {
			return http.Header{"X-Ratelimit-Limit-Requests": {"2"}, "X-Ratelimit-Remaining-Requests": {strconv.Itoa(left)}, "X-Ratelimit-Reset-Requests": {reset}}
		}
		m := &stepsRT{steps: []struct {
			delay time.Duration
			h     http.Header
		}{
			{0, requests(1, "30s")},                 // one left, refilling one in 30 s
			{20 * time.Second, requests(0, "120s")}, // none left, and a refill of one in 60 s
		}}
		pool := &outlast.Pool{Members: []*outlast.Transport{{Name: "m", Base: m}}, Policy: poolPolicy}
		ctx := context.Background()
		if _, err := served(pool, chat(t, ctx, "0", 10)); err != nil {
			t.Fatal(err)
		}
		long := make(chan error)
		go func() { _, err := served(pool, chat(t, ctx, "long", 10)); long <- err }()
		synctest.Wait()
		start := time.Now()
		short, cancel := context.WithTimeout(ctx, 45*time.Second)
		defer cancel()
		_, err := pool.RoundTrip(chat(t, short, "w", 10))
		if !errors.Is(err, outlast.ErrPoolSpent) {
			t.Fatalf("err = %v, want ErrPoolSpent", err)
		}
		if took := time.Since(start); took != 20*time.Second {
			t.Errorf("refused after %v, want 20 s, when the long answer showed its room 60 s away", took)
		}
		if err := <-long; err != nil {
			t.Fatal(err)
		}
	})
}

// A request waits for room only while the time left after the wait
// covers the answer it is expected to take, as the pool's answers read to
// their end have shown, once it has seen 16; one that a member can take
// at once is sent whatever its deadline.
func TestPoolWaitLeavesTimeForTheAnswer(t *testing.T) {
	for _, c := range []struct {
		name     string
		answers  int  // answers of 10 s before the request
		read     bool // whether they are read to their end
		deadline time.Duration
		refused  bool
	}{
		{"too little left for the answer", 16, true, 10500 * time.Millisecond, true},
		{"enough left for the answer", 16, true, 14 * time.Second, false},
		{"fifteen answers seen", 15, true, 10500 * time.Millisecond, false},
		{"answers not read to their end", 16, false, 10500 * time.Millisecond, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := newLimited("a", 16, 1e6) // a request each 3.75 s
				pool := poolOf(poolPolicy, a) // a reserve of 1 s
				ctx := context.Background()
				send := func(id string, ctx context.Context, latency time.Duration, read bool) error {
					r := chat(t, ctx, id, 10)
					r.Header.Set("X-Latency", latency.String())
					resp, err := pool.RoundTrip(r)
					if err != nil {
						return err
					}
					if read {
						io.Copy(io.Discard, resp.Body)
					}
					return resp.Body.Close()
				}
				for i := range c.answers {
					if err := send(strconv.Itoa(i), ctx, 10*time.Second, c.read); err != nil {
						t.Fatal(err)
					}
				}
				// Spend the limit with answers that count nothing: closed
				// before their end.
				for i := 0; pool.State(0).Requests.Remaining > 0; i++ {
					if err := send("spend"+strconv.Itoa(i), ctx, 0, false); err != nil {
						t.Fatal(err)
					}
				}
				sent, _ := a.counts()
				short, cancel := context.WithTimeout(ctx, c.deadline)
				defer cancel()
				start := time.Now()
				err := send("late", short, 0, true)
				switch {
				case c.refused && !errors.Is(err, outlast.ErrPoolSpent):
					t.Fatalf("err = %v, want ErrPoolSpent: room in under 3.75 s, the answer expected to take 10 s, %v left", err, c.deadline)
				case c.refused && time.Since(start) != 0:
					t.Errorf("refused after %v, want at once", time.Since(start))
				case !c.refused && err != nil:
					t.Fatalf("err = %v, want the request served after a wait", err)
				case !c.refused && time.Since(start) == 0:
					t.Error("served at once, want after a wait for room")
				}
				if now, _ := a.counts(); c.refused && now != sent {
					t.Error("the refused request was sent")
				}
				// With room at once, a request is sent even with less
				// time than its answer is expected to take.
				time.Sleep(time.Minute)
				short, cancel = context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				if err := send("room", short, 0, true); err != nil {
					t.Errorf("with room at once: %v, want it sent", err)
				}
			})
		})
	}
}

// A 429 that says nothing of when the member has room (no Retry-After,
// no spent limit: OpenAI's insufficient_quota, say) is retried as the
// policy says, its waits and its window, and not once a second for as
// long as the deadline allows.
func TestPool429WithoutDelayFollowsThePolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var at []time.Duration
		start := time.Now()
		quota := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			at = append(at, time.Since(start))
			return &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{},
				Body: io.NopCloser(strings.NewReader(`{"error":{"code":"insufficient_quota"}}`)), Request: r}, nil
		})
		pool := poolOf(&outlast.Policy{Waits: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, Window: 10 * time.Second, Reserve: time.Second}, quota)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := pool.RoundTrip(chat(t, ctx, "x", 10))
		if err != nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("got %v, %v; want the member's 429", resp, err)
		}
		resp.Body.Close()
		want := []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second} // the next, at 11 s, is past the window
		if !slices.Equal(at, want) {
			t.Errorf("attempts at %v, want %v", at, want)
		}
	})
}

// A limit's reset far off (a server that lies, or a limit of the day) is
// cut to the member's MaxRetryAfter, as a Retry-After is: the member has
// room again by then, and is not shut out until the stated time.
func TestPoolResetCutToMaxRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := http.Header{}
		h.Set("x-ratelimit-limit-requests", "50")
		h.Set("x-ratelimit-remaining-requests", "0")
		h.Set("x-ratelimit-reset-requests", "100h")
		pool := &outlast.Pool{Policy: poolPolicy, Members: []*outlast.Transport{{Name: "a", Base: &headerRT{h: h}, MaxRetryAfter: 30 * time.Second}}}
		if _, err := served(pool, chat(t, context.Background(), "first", 10)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		if _, err := served(pool, chat(t, ctx, "next", 10)); err != nil {
			t.Fatalf("the next request: %v; want it served once the member has room, within 30s", err)
		}
		if took := time.Since(start); took > 30*time.Second {
			t.Errorf("the next request took %v, want at most 30s", took)
		}
	})
}

// A pool's retries are told to the request's hooks as a Transport's are:
// each attempt's RetryIn is the wait the pool took before the next, so
// that a record and the retry metrics see a key being retried.
func TestPoolRetryInTold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		quota := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{},
				Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}, nil
		})
		pool := poolOf(&outlast.Policy{Waits: []time.Duration{time.Second, 2 * time.Second}, Reserve: time.Second}, quota)
		var mu sync.Mutex
		var retryIn []time.Duration
		ctx := outlast.WithHooks(context.Background(), outlast.Hooks{AttemptEnd: func(a outlast.Attempt) {
			mu.Lock()
			retryIn = append(retryIn, a.RetryIn)
			mu.Unlock()
		}})
		resp, err := pool.RoundTrip(chat(t, ctx, "x", 10))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		mu.Lock()
		defer mu.Unlock()
		if want := []time.Duration{time.Second, 2 * time.Second, 0}; !slices.Equal(retryIn, want) {
			t.Errorf("attempts told with RetryIn %v, want %v", retryIn, want)
		}
	})
}

// A member whose stream opens with an error event (Anthropic's
// overloaded_error after message_start) failed the request as the 529 it
// stands for: the request goes at once to another member, and the caller
// reads that member's answer.
func TestPoolErrorEventMoves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sse := map[string]string{"Content-Type": "text/event-stream"}
		overloaded := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\"}}\n\n" +
			"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
		a, b := newFake(step{body: overloaded, header: sse}), newFake(step{body: "data: ok\n\n", header: sse})
		p := &outlast.Pool{
			Members: []*outlast.Transport{{Name: "a", Base: a, FirstByteTimeout: time.Second}, {Name: "b", Base: b, FirstByteTimeout: time.Second}},
			Policy:  &outlast.Policy{Waits: []time.Duration{time.Second}},
		}
		req, _ := http.NewRequest(http.MethodPost, "http://pool.test/v1/messages", strings.NewReader(`{"stream":true}`))
		resp, err := p.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "data: ok\n\n" || len(a.attempts()) != 1 || len(b.attempts()) != 1 {
			t.Errorf("got %q after %d attempts at a, %d at b; want b's answer after one at each", body, len(a.attempts()), len(b.attempts()))
		}
	})
}

// A pool that retries is the layer that retries: across HTTP each
// attempt carries Outlast-Attempt with its number, as a Transport's does,
// so that an outlast gateway behind it makes one attempt and the retries
// do not multiply; its hooks number the attempts across the members; and
// without a deadline, its retries are as many as its waits, those at
// once at another member included.
func TestPoolAttemptHeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newFake(step{status: 503}), newFake(step{status: 503}, step{body: "ok"})
		p := &outlast.Pool{
			Members: []*outlast.Transport{{Name: "a", Base: a}, {Name: "b", Base: b}},
			Policy:  &outlast.Policy{Waits: []time.Duration{time.Second, time.Second}},
		}
		var ns []int
		ctx := outlast.WithHooks(t.Context(), outlast.Hooks{AttemptEnd: func(a outlast.Attempt) { ns = append(ns, a.N) }})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://pool.test/v1/chat/completions", strings.NewReader(`{}`))
		resp, err := p.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if !slices.Equal(ns, []int{1, 2, 3}) {
			t.Errorf("the hooks heard of attempts %v, want 1, 2, 3: two waits, two retries", ns)
		}
		var got []string
		for _, r := range append(a.attempts(), b.attempts()...) {
			got = append(got, r.attempt)
		}
		slices.Sort(got)
		if want := []string{"1", "2", "3"}; !slices.Equal(got, want) || req.Header.Get(outlast.AttemptHeader) != "" {
			t.Errorf("the members saw Outlast-Attempt %q, the caller's request has %q; want %q, and the caller's untouched", got, req.Header.Get(outlast.AttemptHeader), want)
		}
	})
}
