package outlast_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast"
)

// The model test plays random scenarios through a Transport with an
// Admission, in virtual time: an upstream whose behaviour changes from
// phase to phase, and up to 40 requests with their own arrivals, deadlines
// and policies. It then checks what the upstream, the requests' hooks and
// OnState saw against the promises of Admission's doc comment. Nothing in
// it reads the Admission's insides: a property that fails here fails for
// a user too.

// TestAdmissionModel runs the model on fixed seeds, so that go test
// exercises it without -fuzz.
func TestAdmissionModel(t *testing.T) {
	for seed := range uint64(1000) {
		r := rand.New(rand.NewPCG(seed, 0xad))
		data := make([]byte, 200)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		t.Run(fmt.Sprintf("seed%03d", seed), func(t *testing.T) {
			t.Parallel()
			runModel(t, data)
		})
	}
}

// FuzzAdmission decodes a scenario from its input (see decodeScenario)
// and checks the Admission's invariants on it.
func FuzzAdmission(f *testing.F) {
	// A 10 s refused outage and 30 patient requests over 7.5 s.
	f.Add(append([]byte{0, 0, 0, 0, 0, modeRefused, 39, 0, 0, 2, 29}, slices.Repeat([]byte{2, 4, 3}, 30)...))
	// A 429 with Retry-After, then successes that spend the rate limit,
	// with MaxLimit 1 and a queue of 3.
	f.Add(append([]byte{1, 1, 5, 3, 2, 1, 1, mode429After, 20, 2, 1, mode200Spent, 20, 1, 2, 1, 19}, slices.Repeat([]byte{1, 3, 2}, 20)...))
	// 503s with and without Retry-After between slow successes, short
	// deadlines and the default reserve.
	f.Add(append([]byte{2, 2, 3, 7, 0, 5, 4, mode200, 8, 3, 0, mode503, 8, 2, 0, mode503After, 8, 1, 2, mode429, 8, 2, 0, mode200, 8, 4, 0, 1, 39}, slices.Repeat([]byte{1, 1, 4, 2, 2, 1, 0, 3, 0}, 14)...))
	// One request, one short refused phase: all zeros.
	f.Add([]byte{})
	for _, in := range slices.Concat(bugInputs, regressionInputs) {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		runModel(t, data)
	})
}

// bugInputs reproduce, one each, bugs the model found in admission.go and
// that are fixed: each fails its check against the code before the fix.
// Run one with go test -run 'FuzzAdmission/seed#N' (N counts from 0 over
// every f.Add).
var bugInputs = [][]byte{
	// seed#4, checkNotBefore: a 429 at 1 s asks for 4 s; a success sent
	// before it, at 0.25 s, is answered at 1.25 s; the key recovers and is
	// at once healthy and forgotten, so the request at 3.25 s is sent.
	{0, 0, 0, 0, 1, mode429After, 0, 3, 3, mode200, 39, 3, 0, 0, 2, 0, 0, 0, 2, 0, 0, 4, 0, 0},
	// seed#5, checkDownErr: a success at 0 s spends the rate limit for
	// 2 s; a request at 20 ms with a 1 s deadline fails at once, and its
	// error wraps a nil: "(the last failure: %!w(<nil>))".
	{0, 0, 0, 0, 0, mode200Spent, 39, 0, 2, 0, 1, 0, 0, 0, 1, 1, 0},
	// seed#6, checkDownErr: refused at 0 s; a success at 0.25 s (the
	// key, healthy, is forgotten); a success at 0.5 s spends the rate
	// limit; a request at 0.52 s with a 1 s deadline is sent away with an
	// error wrapping a nil, not the refused connection.
	{0, 0, 0, 0, 2, modeRefused, 0, 0, 0, mode200, 0, 0, 0, mode200Spent, 39, 0, 2, 0, 3, 0, 0, 0, 2, 0, 0, 2, 0, 0, 1, 1, 0},
	// seed#7, checkOrder: request 0 arrives at 0 s, is refused (DownAfter
	// 1) and retries at 0.1 s; request 1, arrived at 20 ms, is the probe
	// at 1 s, while request 0 waits until the probe at 3 s.
	{1, 0, 0, 0, 0, modeRefused, 39, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0},
	// seed#8, checkDown: three refusals mark the key down at 1 s; probe
	// P1 goes at about 1.6 s and is answered only at 4.6 s. At 3.25 s a
	// request sent before the key went down spends the rate limit: the
	// key recovers and is down again, P1 still in flight. P2 goes at
	// about 3.8 s; P1's answer, taken for the probe's, puts the key down
	// with P2 in flight, and P3 goes at about 5.1 s; P2's refusal, taken
	// for P3's, lets P4 go at about 7.3 s while P3 is in flight.
	{0, 1, 4, 0, 0, 2, modeRefused, 0, 3, 0, mode200Spent, 12, 4, 0, modeRefused, 39, 4, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
	// seed#9, checkSentAway: down at 2.25 s; request 3 waits from 4.25 s,
	// bound 8.25 s; the probe goes at about 4.8 s; at 5.1 s a 503 sent
	// before the key went down asks for 4 s, and at 5.25 s the probe's
	// request gives up: the key is down until about 9.4 s, but request 3
	// waits on until 8.25 s.
	[]byte("0100001.00A2\"c010000000000899820019"),
}

// regressionInputs failed once, and pass since the bug was fixed.
var regressionInputs = [][]byte{
	// checkRecovering: MaxLimit 1; the probe at 1 s succeeds at 1.2 s,
	// and two of the four waiters left were sent at once under a limit
	// that started at 2 (fixed in dae21cd: min(2, MaxLimit)).
	{1, 0, 0, 1, 0, modeRefused, 0, 0, 0, 2, 5, 0, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0},
}

// upMode is what the model upstream does with the attempts sent during one
// phase of a scenario.
type upMode = byte

const (
	modeRefused  upMode = iota // the connection is refused
	mode503                    // 503
	mode503After               // 503 with Retry-After
	mode429                    // 429 with no delay: rate limiting, not an outage
	mode429After               // 429 with Retry-After
	mode200Spent               // 200, no request left until the limit resets
	mode200                    // 200
	numModes
)

var modeNames = [numModes]string{"refused", "503", "503+Retry-After", "429", "429+Retry-After", "200+spent", "200"}

// phase is a stretch of virtual time during which the upstream answers one
// way.
type phase struct {
	mode    upMode
	length  time.Duration
	latency time.Duration // before the answer
	delay   time.Duration // the Retry-After, or the limit's reset, of the modes that name one
}

// modelReq is one request of a scenario.
type modelReq struct {
	at       time.Duration // its arrival, from the start
	deadline time.Duration // from its arrival; 0 for none
	policy   int           // an index into modelPolicies
}

// scenario is what one input decodes to.
type scenario struct {
	downAfter, maxQueue, maxLimit int
	probeWaits                    []time.Duration
	phases                        []phase
	lastLatency                   time.Duration // of the 200s once the phases are over
	reqs                          []modelReq
}

// The choices an input picks from. Times are chosen so that outages,
// probe waits, server delays, policy waits and deadlines overlap.
var (
	modelLatencies     = [...]time.Duration{0, 10 * time.Millisecond, 200 * time.Millisecond, time.Second, 3 * time.Second}
	modelDelays        = [...]time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second}
	modelLastLatencies = [...]time.Duration{0, 10 * time.Millisecond, 200 * time.Millisecond}
	modelGaps          = [...]time.Duration{0, 20 * time.Millisecond, 250 * time.Millisecond, time.Second, 3 * time.Second}
	modelDeadlines     = [...]time.Duration{0, time.Second, 4 * time.Second, 15 * time.Second, time.Minute}
	modelLimits        = [...]int{0, 1, 2, 3, 4, 8, 16, 64}
	modelPolicies      = [...]*outlast.Policy{
		nil, // one attempt
		{Waits: []time.Duration{100 * time.Millisecond}, Reserve: -1},
		{Waits: []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second}, Reserve: 500 * time.Millisecond},
		{Waits: outlast.Exponential(500*time.Millisecond, 4*time.Second, 5), Reserve: 2 * time.Second},
		{Waits: []time.Duration{time.Second}, MaxAttempts: 3}, // the default reserve, 60 s
	}
	modelPolicyNames = [...]string{"none", "quick", "short", "patient", "default-reserve"}
)

// choices hands out an input's bytes as small choices, and zeros once it
// runs out, so that every input is a scenario.
type choices []byte

func (c *choices) pick(n int) int {
	if len(*c) == 0 {
		return 0
	}
	v := int((*c)[0]) % n
	*c = (*c)[1:]
	return v
}

// decodeScenario reads, in order: DownAfter, ProbeWaits, MaxQueue and
// MaxLimit; the phases, each a mode, length, latency and delay; the
// latency once they are over; and the requests, each a gap since the one
// before, a deadline and a policy. A zero byte picks the default.
func decodeScenario(data []byte) *scenario {
	c := choices(data)
	sc := &scenario{downAfter: c.pick(5)}
	for range c.pick(4) {
		sc.probeWaits = append(sc.probeWaits, time.Duration(1+c.pick(30))*100*time.Millisecond)
	}
	if c.pick(4) == 3 {
		sc.maxQueue = 1 + c.pick(40)
	}
	sc.maxLimit = modelLimits[c.pick(len(modelLimits))]
	for range 1 + c.pick(5) {
		sc.phases = append(sc.phases, phase{
			mode:    upMode(c.pick(int(numModes))),
			length:  time.Duration(1+c.pick(40)) * 250 * time.Millisecond,
			latency: modelLatencies[c.pick(len(modelLatencies))],
			delay:   modelDelays[c.pick(len(modelDelays))],
		})
	}
	sc.lastLatency = modelLastLatencies[c.pick(len(modelLastLatencies))]
	var at time.Duration
	for range 1 + c.pick(40) {
		at += modelGaps[c.pick(len(modelGaps))]
		sc.reqs = append(sc.reqs, modelReq{
			at:       at,
			deadline: modelDeadlines[c.pick(len(modelDeadlines))],
			policy:   c.pick(len(modelPolicies)),
		})
	}
	return sc
}

// phaseAt returns the phase in force d after the start.
func (sc *scenario) phaseAt(d time.Duration) phase {
	for _, p := range sc.phases {
		if d < p.length {
			return p
		}
		d -= p.length
	}
	return phase{mode: mode200, latency: sc.lastLatency}
}

// healthyFrom returns when the phases end, from the start.
func (sc *scenario) healthyFrom() time.Duration {
	var d time.Duration
	for _, p := range sc.phases {
		d += p.length
	}
	return d
}

func (sc *scenario) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Admission{DownAfter: %d, ProbeWaits: %v, MaxQueue: %d, MaxLimit: %d}\nphases:", sc.downAfter, sc.probeWaits, sc.maxQueue, sc.maxLimit)
	for _, p := range sc.phases {
		fmt.Fprintf(&b, " %s for %v (latency %v", modeNames[p.mode], p.length, p.latency)
		if p.mode == mode503After || p.mode == mode429After || p.mode == mode200Spent {
			fmt.Fprintf(&b, ", delay %v", p.delay)
		}
		b.WriteString(");")
	}
	fmt.Fprintf(&b, " then 200 (latency %v)\nrequests:", sc.lastLatency)
	for i, r := range sc.reqs {
		fmt.Fprintf(&b, " #%d at %v deadline %v policy %s;", i, r.at, r.deadline, modelPolicyNames[r.policy])
	}
	return b.String()
}

// sentAttempt is one attempt as the model upstream saw it.
type sentAttempt struct {
	req, n   int // its request, and its number (Outlast-Attempt, else 1)
	at       time.Time
	mode     upMode
	answered time.Time     // zero when the request's context ended first
	delay    time.Duration // the not-before delay its answer set, if any
	end      time.Time     // when it stopped being in flight: answered, cut short or its body done
}

// delayed reports whether its answer set a not-before time.
func (x *sentAttempt) delayed() bool { return x.delay > 0 }

// outage reports whether its answer is an outage failure: one that
// counts toward DownAfter.
func (x *sentAttempt) outage() bool { return !x.answered.IsZero() && x.mode <= mode503After }

// up reports whether its answer says the upstream is up, whatever it
// thought of the request: one that ends a run of outage failures.
func (x *sentAttempt) up() bool {
	return !x.answered.IsZero() && (x.mode == mode200 || x.mode == mode200Spent || x.mode == mode429)
}

// inFlightAfter reports whether x was still in flight at the end of t.
func (x *sentAttempt) inFlightAfter(t time.Time) bool {
	return !x.at.After(t) && (x.end.IsZero() || x.end.After(t))
}

// modelUpstream answers each attempt as the phase in force when it is
// sent says, and records what it did.
type modelUpstream struct {
	sc    *scenario
	start time.Time
	mu    sync.Mutex // guards sent and the fields of its attempts
	sent  []*sentAttempt
}

func (u *modelUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	now := time.Now()
	p := u.sc.phaseAt(now.Sub(u.start))
	x := &sentAttempt{n: 1, at: now, mode: p.mode}
	x.req, _ = strconv.Atoi(r.Header.Get("X-Id"))
	if v := r.Header.Get(outlast.AttemptHeader); v != "" {
		x.n, _ = strconv.Atoi(v)
	}
	u.mu.Lock()
	u.sent = append(u.sent, x)
	u.mu.Unlock()
	if p.latency > 0 {
		t := time.NewTimer(p.latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			u.mu.Lock()
			x.end = time.Now()
			u.mu.Unlock()
			return nil, r.Context().Err()
		}
	}
	return u.answer(r, x, p)
}

// answer answers x as phase p says.
func (u *modelUpstream) answer(r *http.Request, x *sentAttempt, p phase) (*http.Response, error) {
	now := time.Now()
	h := http.Header{}
	status := http.StatusOK
	switch p.mode {
	case mode503, mode503After:
		status = http.StatusServiceUnavailable
	case mode429, mode429After:
		status = http.StatusTooManyRequests
	case mode200Spent:
		h.Set("X-Ratelimit-Remaining-Requests", "0")
		h.Set("X-Ratelimit-Reset-Requests", p.delay.String())
	}
	if p.mode == mode503After || p.mode == mode429After {
		// RFC 9110 §10.2.3 delay-seconds; RetryAfter also takes decimals.
		h.Set("Retry-After", strconv.FormatFloat(p.delay.Seconds(), 'f', -1, 64))
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	x.answered = now
	if p.mode == mode503After || p.mode == mode429After || p.mode == mode200Spent {
		x.delay = p.delay
	}
	if p.mode == modeRefused {
		x.end = now
		return nil, errRefused
	}
	if status != http.StatusOK {
		x.end = now
		return &http.Response{StatusCode: status, Header: h, Body: http.NoBody, Request: r}, nil
	}
	return &http.Response{StatusCode: status, Header: h, Body: &endBody{u: u, x: x}, Request: r}, nil
}

// endBody is an empty body whose attempt is in flight until it is read
// to its end or closed.
type endBody struct {
	u    *modelUpstream
	x    *sentAttempt
	once sync.Once
}

func (b *endBody) done() {
	b.once.Do(func() {
		b.u.mu.Lock()
		b.x.end = time.Now()
		b.u.mu.Unlock()
	})
}

func (b *endBody) Read([]byte) (int, error) { b.done(); return 0, io.EOF }
func (b *endBody) Close() error             { b.done(); return nil }

// try is one attempt as its request's hooks saw it.
type try struct {
	n       int
	start   time.Time
	probe   bool
	admWait time.Duration
	end     time.Time // zero until it ended
	retryIn time.Duration
}

// reqRecord is one request of a scenario and what became of it. Only its
// own goroutine writes it until the request returns.
type reqRecord struct {
	id              int
	arrival         time.Time
	deadline, bound time.Time // zero for no deadline
	ret             time.Time // zero if it never returned
	err             error
	tries           []try
	queuedAt        []snapshot // when it joined the Admission's queue
}

// snapshot is the Admission's state of the key at an instant.
type snapshot struct {
	at    time.Time
	state outlast.AdmissionState
}

func (rec *reqRecord) started(at outlast.Attempt) {
	rec.tries = append(rec.tries, try{n: at.N, start: at.Start, probe: at.Probe, admWait: at.AdmissionWait})
}

func (rec *reqRecord) ended(at outlast.Attempt) {
	if n := len(rec.tries); n > 0 && rec.tries[n-1].n == at.N {
		rec.tries[n-1].end, rec.tries[n-1].retryIn = at.End, at.RetryIn
	}
}

// run sends the request through tr, whose Admission is a, and records
// how it ended.
func (rec *reqRecord) run(ctx context.Context, tr http.RoundTripper, a *outlast.Admission, r modelReq) {
	if r.deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, rec.deadline)
		defer cancel()
	}
	if p := modelPolicies[r.policy]; p != nil {
		ctx = outlast.WithPolicy(ctx, p)
	}
	// Queued is called without a lock held, once the request is in the
	// queue: the state it sees is the one it waits under.
	queued := func(string, int) { rec.queuedAt = append(rec.queuedAt, snapshot{time.Now(), a.State(modelKey)}) }
	ctx = outlast.WithHooks(ctx, outlast.Hooks{AttemptStart: rec.started, AttemptEnd: rec.ended, Queued: queued})
	err := send1(ctx, tr, strconv.Itoa(rec.id))
	rec.ret, rec.err = time.Now(), err
}

// admitted returns the instants at which the request went to the
// Admission: its arrival, and the end of each wait before a retry.
func (rec *reqRecord) admitted() []time.Time {
	at := []time.Time{rec.arrival}
	for _, x := range rec.tries {
		if !x.end.IsZero() {
			at = append(at, x.end.Add(x.retryIn))
		}
	}
	return at
}

// span is a stretch of virtual time, its ends excluded.
type span struct{ from, to time.Time }

func (s span) holds(t time.Time) bool { return s.from.Before(t) && t.Before(s.to) }

// queued returns the spans during which the request waited at the
// Admission, each from when it went there to when it was sent or left.
func (rec *reqRecord) queued() []span {
	var s []span
	next := rec.arrival
	for _, x := range rec.tries {
		if x.admWait > 0 {
			s = append(s, span{x.start.Add(-x.admWait), x.start})
		}
		next = time.Time{}
		if !x.end.IsZero() && x.retryIn > 0 {
			next = x.end.Add(x.retryIn)
		}
	}
	// It returned without a further attempt: from the Admission, if it
	// got there before it returned.
	if !next.IsZero() && rec.ret.After(next) {
		s = append(s, span{next, rec.ret})
	}
	return s
}

// stateEvent is one OnState call.
type stateEvent struct {
	at       time.Time
	key      string
	from, to outlast.UpstreamState
	after    outlast.AdmissionState // the key's state once the call came
}

// stateLog records OnState calls with their virtual time.
type stateLog struct {
	a      *outlast.Admission
	mu     sync.Mutex // guards events
	events []stateEvent
}

func (l *stateLog) record(key string, from, to outlast.UpstreamState, at time.Time) {
	// OnState is called without the Admission's lock.
	after := l.a.State(modelKey)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, stateEvent{at, key, from, to, after})
}

// modelKey is the key of every request: the host of send1's URL.
const modelKey = "model.test"

// modelWatchdog bounds the virtual time a scenario may take: far more than
// its phases, arrivals, deadlines and waits add up to.
const modelWatchdog = time.Hour

// runModel decodes data and plays it in a synctest bubble, then checks it.
func runModel(t *testing.T, data []byte) {
	sc := decodeScenario(data)
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		u := &modelUpstream{sc: sc, start: start}
		states := &stateLog{}
		// Every delay holds the key: the model checks the state machine
		// with not-before times; a short delay, left to the request, is
		// TestAdmissionShortDelay's.
		a := &outlast.Admission{ShortDelay: -1, DownAfter: sc.downAfter, ProbeWaits: sc.probeWaits, MaxQueue: sc.maxQueue, MaxLimit: sc.maxLimit, OnState: states.record}
		states.a = a
		tr := &outlast.Transport{Base: u, Admission: a, Logger: discardLogger()}
		root, cancel := context.WithCancel(t.Context())
		defer cancel()
		reqs := make([]*reqRecord, len(sc.reqs))
		var wg sync.WaitGroup
		for i, r := range sc.reqs {
			time.Sleep(time.Until(start.Add(r.at)))
			rec := &reqRecord{id: i, arrival: time.Now()}
			if r.deadline > 0 {
				rec.deadline = rec.arrival.Add(r.deadline)
				rec.bound = rec.deadline.Add(-modelReserve(modelPolicies[r.policy]))
			}
			reqs[i] = rec
			wg.Go(func() { rec.run(root, tr, a, r) })
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(modelWatchdog):
			t.Errorf("requests still running %v after the start, want every one returned (input %q)\n%v", modelWatchdog, data, sc)
			cancel()
			<-done
		}
		synctest.Wait() // the Admission's timers have done what they do now
		m := newModel(sc, start, u, reqs, states, a.State(modelKey))
		m.check()
		if len(m.fails) > 0 {
			const most = 8
			t.Errorf("%d violations; input %q\n%v\n%s", len(m.fails), data, sc, strings.Join(m.fails[:min(most, len(m.fails))], "\n"))
		}
	})
}

// modelReserve returns the reserve a Transport keeps for a request under
// p: none without a policy.
func modelReserve(p *outlast.Policy) time.Duration {
	switch {
	case p == nil || p.Reserve < 0:
		return 0
	case p.Reserve == 0:
		return outlast.DefaultReserve
	}
	return p.Reserve
}

// model is what a scenario did, for the checks.
type model struct {
	sc      *scenario
	start   time.Time
	sent    []*sentAttempt // by the time they were sent
	answers []*sentAttempt // those answered, by the time they were
	reqs    []*reqRecord
	tl      timeline
	events  []stateEvent
	final   outlast.AdmissionState

	downAfter, maxQueue, maxLimit int
	probeWaits                    []time.Duration

	fails []string
}

func newModel(sc *scenario, start time.Time, u *modelUpstream, reqs []*reqRecord, states *stateLog, final outlast.AdmissionState) *model {
	m := &model{sc: sc, start: start, sent: u.sent, reqs: reqs, final: final,
		downAfter: sc.downAfter, maxQueue: sc.maxQueue, maxLimit: sc.maxLimit, probeWaits: sc.probeWaits}
	if m.downAfter == 0 {
		m.downAfter = outlast.DefaultDownAfter
	}
	if m.maxQueue == 0 {
		m.maxQueue = outlast.DefaultAdmissionQueue
	}
	if m.maxLimit == 0 {
		m.maxLimit = outlast.DefaultMaxLimit
	}
	if len(m.probeWaits) == 0 {
		m.probeWaits = outlast.DefaultProbeWaits
	}
	for _, x := range m.sent {
		if !x.answered.IsZero() {
			m.answers = append(m.answers, x)
		}
	}
	sort.SliceStable(m.answers, func(i, j int) bool { return m.answers[i].answered.Before(m.answers[j].answered) })
	for _, e := range states.events {
		if e.key != modelKey {
			m.failf("OnState for key %q, want %q", e.key, modelKey)
		}
	}
	m.events = states.events
	m.tl = m.buildTimeline(states.events)
	return m
}

func (m *model) failf(format string, args ...any) {
	m.fails = append(m.fails, fmt.Sprintf(format, args...))
}

// rel returns t as a time since the start, for messages.
func (m *model) rel(t time.Time) time.Duration { return t.Sub(m.start) }

// try returns the hooks' record of the attempt x, or nil.
func (m *model) try(x *sentAttempt) *try {
	if x.req < 0 || x.req >= len(m.reqs) {
		return nil
	}
	for i, tr := range m.reqs[x.req].tries {
		if tr.n == x.n {
			return &m.reqs[x.req].tries[i]
		}
	}
	return nil
}

func (m *model) probe(x *sentAttempt) bool {
	tr := m.try(x)
	return tr != nil && tr.probe
}

// delayedAt reports whether an answer at t set a not-before time.
func (m *model) delayedAt(t time.Time) bool {
	for _, x := range m.answers {
		if x.answered.Equal(t) && x.delayed() {
			return true
		}
	}
	return false
}

// fullAt reports whether an answer at t was a 429 without a delay: the
// upstream answering that it is full. At a recovering key's limit of 1,
// or to the probe, it puts the key down again.
func (m *model) fullAt(t time.Time) bool {
	for _, x := range m.answers {
		if x.answered.Equal(t) && x.mode == mode429 {
			return true
		}
	}
	return false
}

// isDown reports whether s holds the queue back for a probe.
func isDown(s outlast.UpstreamState) bool { return s == outlast.Down || s == outlast.Probing }

// instant is the state changes of one virtual instant. Within an instant
// the changes that different goroutines made are reported in any order,
// so only what they add up to is known: where they start and end, and
// which states the key passed through.
type instant struct {
	at            time.Time
	before, after outlast.UpstreamState
	up            bool // healthy or recovering at some moment of it
	healthy       bool // healthy at some moment of it
	recovering    bool // recovering at some moment of it
	toHealthy     bool // a change to healthy
	upToDown      bool // a change from healthy or recovering to down
	probeToDown   bool // a change from probing to down
	lastUp        int  // the index of the latest instant up to this one that was up
}

// timeline is the key's state changes, an instant each.
type timeline []instant

// buildTimeline groups OnState calls by instant and checks that each
// instant's changes chain on from the state the last one left.
func (m *model) buildTimeline(events []stateEvent) timeline {
	var tl timeline
	state, lastUp := outlast.Healthy, -1
	for len(events) > 0 {
		n := 1
		for n < len(events) && events[n].at.Equal(events[0].at) {
			n++
		}
		in := instant{at: events[0].at, before: state}
		m.chain(&in, events[:n])
		if in.up {
			lastUp = len(tl)
		}
		in.lastUp = lastUp
		tl = append(tl, in)
		state, events = in.after, events[n:]
	}
	return tl
}

// chain sets in's after and flags from its changes. Changes that chain
// from before to after make a path: every state is left as often as it
// is entered, but before, left once more, and after, entered once more.
func (m *model) chain(in *instant, evs []stateEvent) {
	var deg [4]int // left less entered
	for _, e := range evs {
		if e.from == e.to || e.from > outlast.Recovering || e.to > outlast.Recovering {
			m.failf("at %v: OnState(%v, %v), want a change between two states", m.rel(in.at), e.from, e.to)
			continue
		}
		deg[e.from]++
		deg[e.to]--
		for _, s := range [2]outlast.UpstreamState{e.from, e.to} {
			in.up = in.up || s == outlast.Healthy || s == outlast.Recovering
			in.healthy = in.healthy || s == outlast.Healthy
			in.recovering = in.recovering || s == outlast.Recovering
		}
		in.upToDown = in.upToDown || e.to == outlast.Down && (e.from == outlast.Healthy || e.from == outlast.Recovering)
		in.probeToDown = in.probeToDown || e.from == outlast.Probing && e.to == outlast.Down
		in.toHealthy = in.toHealthy || e.to == outlast.Healthy
	}
	// Less the one extra leaving of before, only after is entered once
	// more than it is left.
	deg[in.before]--
	ends := 0
	for s, d := range deg {
		switch d {
		case 0:
		case -1:
			in.after = outlast.UpstreamState(s)
			ends++
		default:
			ends = 2
		}
	}
	if ends != 1 {
		var names []string
		for _, e := range evs {
			names = append(names, fmt.Sprintf("%v→%v", e.from, e.to))
		}
		m.failf("at %v: OnState changes %v do not chain on from %v, where the key was", m.rel(in.at), names, in.before)
		in.after = in.before
	}
}

// locate returns the index of the first instant at or after t, and
// whether it is at t.
func (tl timeline) locate(t time.Time) (int, bool) {
	i := sort.Search(len(tl), func(i int) bool { return !tl[i].at.Before(t) })
	return i, i < len(tl) && tl[i].at.Equal(t)
}

// stateAfter returns the key's state at the end of instant t.
func (tl timeline) stateAfter(t time.Time) outlast.UpstreamState {
	i, exact := tl.locate(t)
	if exact {
		return tl[i].after
	}
	if i == 0 {
		return outlast.Healthy
	}
	return tl[i-1].after
}

// downSince reports whether the key was down or probing for the whole of
// instant t, and if so since when: the last instant before t at which it
// was healthy or recovering at some moment. Attempts sent at such an
// instant went as the probe.
func (tl timeline) downSince(t time.Time) (time.Time, bool) {
	i, exact := tl.locate(t)
	switch {
	case exact && tl[i].up:
		return time.Time{}, false
	case exact:
	case i == 0 || !isDown(tl[i-1].after):
		return time.Time{}, false
	default:
		i--
	}
	if tl[i].lastUp < 0 {
		return time.Time{}, false // cannot be: the key starts healthy
	}
	return tl[tl[i].lastUp].at, true
}

// recoveringAt reports whether every attempt sent at instant t without
// being the probe went under a recovering key's limit: the key ended t
// recovering and was never healthy during it.
func (tl timeline) recoveringAt(t time.Time) bool {
	i, exact := tl.locate(t)
	switch {
	case exact:
		return tl[i].after == outlast.Recovering && !tl[i].healthy
	case i == 0:
		return false
	}
	return tl[i-1].after == outlast.Recovering
}

// recoveringDuring reports whether the key was recovering at some moment
// of instant t, and never healthy during it: a request's last chance at t
// may have gone before its own failure took the key down in that instant.
func (tl timeline) recoveringDuring(t time.Time) bool {
	if i, exact := tl.locate(t); exact {
		return tl[i].recovering && !tl[i].healthy
	}
	return tl.recoveringAt(t)
}

// check runs every check.
func (m *model) check() {
	m.checkAttempts()
	m.checkFinal()
	m.checkReturns()
	m.checkDown()
	m.checkNotBefore()
	m.checkRecovering()
	m.checkDownAfter()
	m.checkOrder()
	m.checkLiveness()
}

// checkAttempts: every attempt the upstream saw was reported to its
// request's hooks, and ended.
func (m *model) checkAttempts() {
	starts := 0
	for _, r := range m.reqs {
		starts += len(r.tries)
	}
	if starts != len(m.sent) {
		m.failf("the hooks saw %d attempts start, the upstream %d, want the same", starts, len(m.sent))
	}
	for _, x := range m.sent {
		if m.try(x) == nil {
			m.failf("attempt %d of request %d, sent at %v, has no AttemptStart", x.n, x.req, m.rel(x.at))
		}
		if x.end.IsZero() {
			m.failf("attempt %d of request %d, sent at %v, never ended: want its body closed", x.n, x.req, m.rel(x.at))
		}
	}
}

// checkFinal: once every request has returned, nothing is in flight or
// waiting, and the key is in the state that OnState last reported.
func (m *model) checkFinal() {
	want := outlast.Healthy
	if len(m.tl) > 0 {
		want = m.tl[len(m.tl)-1].after
	}
	if m.final.State != want || m.final.InFlight != 0 || m.final.Waiting != 0 {
		m.failf("at the end: State %+v, want state %v (OnState's last), nothing in flight or waiting", m.final, want)
	}
}

// checkReturns: no request returns after its deadline, nor waits at the
// Admission past its deadline less its reserve; ErrUpstreamDown
// comes at once, or when an answer or the deadline's reserve says there is
// no chance left, wrapping the last failure; ErrBusy only with the queue
// full.
func (m *model) checkReturns() {
	for _, r := range m.reqs {
		if r.ret.IsZero() {
			continue // the watchdog said so
		}
		if !r.deadline.IsZero() && r.ret.After(r.deadline) {
			m.failf("request %d returned at %v, after its deadline at %v", r.id, m.rel(r.ret), m.rel(r.deadline))
		}
		for _, w := range r.queued() {
			// No wait at the Admission outlasts the deadline less the
			// reserve, unless that was over when the wait began.
			if !r.bound.IsZero() && w.to.After(r.bound) && w.to.After(w.from) && w.from.Before(r.bound) {
				m.failf("request %d waited at the Admission from %v to %v, past its deadline less its reserve at %v", r.id, m.rel(w.from), m.rel(w.to), m.rel(r.bound))
			}
		}
		m.checkSentAway(r)
		if errors.Is(r.err, outlast.ErrUpstreamDown) {
			m.checkDownErr(r)
		}
		if errors.Is(r.err, outlast.ErrBusy) {
			m.checkBusy(r)
		}
	}
}

// checkSentAway: a request that waits for a down key whose next chance to
// send, the probe or the not-before time, comes after its deadline less
// its reserve leaves at once, with ErrUpstreamDown: when it joins the
// queue, and when the key goes down while it waits.
func (m *model) checkSentAway(r *reqRecord) {
	if r.bound.IsZero() {
		return
	}
	for _, q := range r.queuedAt {
		next, down := nextChance(q.at, q.state)
		if down && next.After(r.bound) && (!r.ret.Equal(q.at) || !errors.Is(r.err, outlast.ErrUpstreamDown)) {
			m.failf("request %d joined the queue at %v of a down key whose next chance, at %v, is after its deadline less its reserve at %v; it returned at %v with %v, want at once with ErrUpstreamDown",
				r.id, m.rel(q.at), m.rel(next), m.rel(r.bound), m.rel(r.ret), r.err)
		}
	}
	for _, e := range m.events {
		next, down := nextChance(e.at, e.after)
		if e.to != outlast.Down || !down || !next.After(r.bound) {
			continue
		}
		for _, w := range r.queued() {
			if w.holds(e.at) {
				m.failf("request %d waited from %v to %v, though at %v the key went down with its next chance at %v, after the request's deadline less its reserve at %v: want it sent away then",
					r.id, m.rel(w.from), m.rel(w.to), m.rel(e.at), m.rel(next), m.rel(r.bound))
			}
		}
	}
}

// nextChance returns, for a key in state s at t, when a request may next
// be sent, and whether the key is down (not probing): the next probe or
// the not-before time, whichever is later.
func nextChance(t time.Time, s outlast.AdmissionState) (time.Time, bool) {
	for _, u := range [2]time.Time{s.NextProbe, s.NotBefore} {
		if u.After(t) {
			t = u
		}
	}
	return t, s.State == outlast.Down
}

func (m *model) checkDownErr(r *reqRecord) {
	switch {
	case r.deadline.IsZero():
		m.failf("request %d, with no deadline, failed at %v with %v: want ErrUpstreamDown only for a deadline that a wait cannot fit", r.id, m.rel(r.ret), r.err)
	case r.ret.After(r.bound) && !slices.ContainsFunc(r.admitted(), r.ret.Equal):
		m.failf("request %d failed with ErrUpstreamDown at %v, after waiting past its deadline less its reserve at %v", r.id, m.rel(r.ret), m.rel(r.bound))
	}
	when := append(r.admitted(), r.bound)
	for _, x := range m.answers {
		when = append(when, x.answered)
	}
	if !slices.ContainsFunc(when, r.ret.Equal) {
		m.failf("request %d failed with ErrUpstreamDown at %v: not when it went to the Admission (%v from the start), nor at an answer, nor at its deadline less its reserve", r.id, m.rel(r.ret), r.admitted())
	}
	if strings.Contains(r.err.Error(), "%!") {
		m.failf("request %d: %q, want an error without a nil %%w", r.id, r.err)
	}

	// The last failure is the last since the key was last healthy, as
	// ErrUpstreamDown's doc says: a success that lets the key be
	// forgotten ends it.
	var se *outlast.StatusError
	wraps := errors.As(r.err, &se) || errors.Is(r.err, syscall.ECONNREFUSED)
	if !wraps && m.failedBetween(m.forgettable(r.ret), r.ret) {
		m.failf("request %d: %q, want ErrUpstreamDown wrapping the last failure (a status or the refused connection)", r.id, r.err)
	}
}

// forgettable returns the last instant before t at which the key may have
// been forgotten: a change to healthy, or an answer that ends a run of
// outage failures.
func (m *model) forgettable(t time.Time) time.Time {
	var at time.Time
	for _, in := range m.tl {
		if in.toHealthy && in.at.Before(t) {
			at = in.at
		}
	}
	for _, x := range m.answers {
		if x.up() && x.answered.Before(t) && x.answered.After(at) {
			at = x.answered
		}
	}
	return at
}

// failedBetween reports whether an answer in (from, to) was a failure that
// the key keeps as its last.
func (m *model) failedBetween(from, to time.Time) bool {
	for _, x := range m.answers {
		if x.answered.After(from) && x.answered.Before(to) && (x.outage() || x.delayed() && x.mode != mode200Spent) {
			return true
		}
	}
	return false
}

func (m *model) checkBusy(r *reqRecord) {
	others := 0
	for _, q := range m.reqs {
		if q != r && !q.arrival.After(r.ret) && (q.ret.IsZero() || !q.ret.Before(r.ret)) {
			others++
		}
	}
	if others < m.maxQueue {
		m.failf("request %d got ErrBusy at %v with %d other requests under way, want it only past MaxQueue %d waiting", r.id, m.rel(r.ret), others, m.maxQueue)
	}
}

// checkDown: while the key is down, only the probe is sent, one at a
// time, on the ProbeWaits schedule. Attempts sent before it went down may
// still be in flight; they are not counted.
func (m *model) checkDown() {
	var periods []time.Time
	post := map[time.Time][]*sentAttempt{} // sent at instants wholly down, by when the key went down
	for _, x := range m.sent {
		since, ok := m.tl.downSince(x.at)
		if !ok {
			continue
		}
		if !m.probe(x) {
			m.failf("attempt %d of request %d was sent at %v, while the key was down (since %v), and is not the probe", x.n, x.req, m.rel(x.at), m.rel(since))
		}
		if post[since] == nil {
			periods = append(periods, since)
		}
		post[since] = append(post[since], x)
	}
	for _, since := range periods {
		xs := post[since]
		for _, x := range xs {
			n := 0
			for _, y := range xs {
				if y.inFlightAfter(x.at) {
					n++
				}
			}
			if n > 1 {
				m.failf("at %v, %d attempts sent since the key went down at %v were in flight, want 1: the probe", m.rel(x.at), n, m.rel(since))
			}
		}
		m.checkProbeWaits(since, xs)
	}
}

// checkProbeWaits checks the probes xs of the down period since: the first
// waits ProbeWaits[0] after a key marked down by outage failures, and each
// after a failed probe waits at least the shortest of the later waits.
func (m *model) checkProbeWaits(since time.Time, xs []*sentAttempt) {
	i, _ := m.tl.locate(since)
	if in := m.tl[i]; in.upToDown && !in.probeToDown && !m.delayedAt(since) {
		if first := xs[0]; first.at.Before(since.Add(m.probeWaits[0])) {
			m.failf("the first probe after the key went down at %v went at %v, want ProbeWaits[0] %v later", m.rel(since), m.rel(first.at), m.probeWaits[0])
		}
	}
	least := m.probeWaits[len(m.probeWaits)-1]
	for _, w := range m.probeWaits[1:] {
		least = min(least, w)
	}
	for _, y := range xs {
		failed := y.outage() || y.delayed() && y.mode != mode200Spent
		if s, ok := m.tl.downSince(y.answered); !failed || !ok || !s.Equal(since) {
			continue
		}
		for _, z := range xs {
			if z.at.After(y.answered) && z.at.Before(y.answered.Add(least)) {
				m.failf("a probe went at %v, %v after the probe that failed (%s) at %v, want at least %v (ProbeWaits %v)",
					m.rel(z.at), z.at.Sub(y.answered), modeNames[y.mode], m.rel(y.answered), least, m.probeWaits)
			}
		}
	}
}

// checkNotBefore: no attempt is sent before the not-before time that an
// answer set (its jitter only adds to it).
func (m *model) checkNotBefore() {
	for _, y := range m.answers {
		if !y.delayed() {
			continue
		}
		nb := y.answered.Add(y.delay)
		for _, z := range m.sent {
			if z.at.After(y.answered) && z.at.Before(nb) {
				m.failf("attempt %d of request %d was sent at %v, before %v, the not-before time that a %s answered at %v set",
					z.n, z.req, m.rel(z.at), m.rel(nb), modeNames[y.mode], m.rel(y.answered))
				break
			}
		}
	}
}

// checkRecovering: the attempts sent under a recovering key's limit never
// have more than MaxLimit in flight. A request's last chance, at its
// bound, goes past the limit, and still holds a place under it.
func (m *model) checkRecovering() {
	var under []*sentAttempt
	for _, x := range m.sent {
		if m.tl.recoveringAt(x.at) && !m.probe(x) && !m.lastChance(x.req, x.at) {
			under = append(under, x)
		}
	}
	for _, x := range under {
		n := 0
		for _, y := range under {
			if y.inFlightAfter(x.at) {
				n++
			}
		}
		if n > m.maxLimit {
			m.failf("at %v, %d attempts sent under the recovering key's limit were in flight, want at most MaxLimit %d", m.rel(x.at), n, m.maxLimit)
		}
	}
}

// checkDownAfter: a key goes down on DownAfter outage failures in a row
// (or on a not-before time, or on a 429 when it cannot halve its limit),
// not before and not after.
func (m *model) checkDownAfter() {
	for _, in := range m.tl {
		if !in.upToDown || m.delayedAt(in.at) || m.fullAt(in.at) {
			continue
		}
		// The most outage failures in a row there can have been: those
		// since the last answer before in that said the upstream is up,
		// its own instant included.
		var since time.Time
		for _, x := range m.answers {
			if x.answered.Before(in.at) && x.up() {
				since = x.answered
			}
		}
		n := 0
		for _, x := range m.answers {
			if x.outage() && !x.answered.Before(since) && !x.answered.After(in.at) {
				n++
			}
		}
		if n < m.downAfter {
			m.failf("the key went down at %v after at most %d outage failures in a row, want DownAfter %d", m.rel(in.at), n, m.downAfter)
		}
	}
	// The fewest there can have been: those after the last instant with
	// an answer that said the upstream is up.
	n := 0
	for i := 0; i < len(m.answers); {
		at, up, outages := m.answers[i].answered, false, 0
		for ; i < len(m.answers) && m.answers[i].answered.Equal(at); i++ {
			up = up || m.answers[i].up()
			if m.answers[i].outage() {
				outages++
			}
		}
		if up {
			n = 0
			continue
		}
		n += outages
		if s := m.tl.stateAfter(at); n >= m.downAfter && !isDown(s) {
			m.failf("at %v, after %d outage failures in a row, the key is %v, want down (DownAfter %d)", m.rel(at), n, s, m.downAfter)
		}
	}
}

// lastChance reports whether request req's attempt sent at t was its
// last chance: sent at its deadline less its reserve, while the key was
// recovering, when it goes past the limit and the waiters ahead.
func (m *model) lastChance(req int, t time.Time) bool {
	r := m.reqs[req]
	return !r.bound.IsZero() && t.Equal(r.bound) && m.tl.recoveringDuring(t)
}

// checkOrder: a request is never sent while one that arrived before it
// waits at the Admission, but at its last chance. A request keeps the
// place its arrival gave it.
func (m *model) checkOrder() {
	for _, a := range m.reqs {
		for _, s := range a.queued() {
			for _, b := range m.reqs {
				if !b.arrival.After(a.arrival) {
					continue
				}
				for _, x := range b.tries {
					if s.holds(x.start) && !m.lastChance(b.id, x.start) {
						m.failf("request %d (arrived at %v) was sent at %v while request %d, which arrived at %v, waited from %v to %v",
							b.id, m.rel(b.arrival), m.rel(x.start), a.id, m.rel(a.arrival), m.rel(s.from), m.rel(s.to))
					}
				}
			}
		}
	}
}

// checkLiveness: once the upstream has been healthy long enough for every
// earlier attempt, probe wait and not-before time to be over, a request
// whose deadline leaves room succeeds, unless the queue is full.
func (m *model) checkLiveness() {
	var latency, delay time.Duration
	for _, p := range m.sc.phases {
		latency = max(latency, p.latency)
		if p.mode == mode503After || p.mode == mode429After || p.mode == mode200Spent {
			delay = max(delay, p.delay)
		}
	}
	// Probe waits are jittered up by as much as half, not-before times
	// by as much as a tenth.
	wait := slices.Max(m.probeWaits)
	settled := m.start.Add(m.sc.healthyFrom() + latency + max(wait+wait/2, delay+delay/10) + time.Millisecond)
	room := 45*m.sc.lastLatency + 2*time.Second // a probe, then up to 40 ahead, one at a time
	for _, r := range m.reqs {
		if r.arrival.Before(settled) || !r.bound.IsZero() && r.bound.Before(r.arrival.Add(room)) {
			continue
		}
		if r.err != nil && !errors.Is(r.err, outlast.ErrBusy) {
			m.failf("request %d arrived at %v, with the upstream healthy since %v and settled, and failed: %v", r.id, m.rel(r.arrival), m.sc.healthyFrom(), r.err)
		}
	}
}
