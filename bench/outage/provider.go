package main

import (
	"context"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// An outcome is what the provider did with one attempt.
type outcome uint8

const (
	served      outcome = iota // 200 with a whole body
	broken                     // 200 headers, then the body broke
	throttled                  // 429: every slot was busy
	unavailable                // 503: the outage
	hung                       // no answer until the client gave up on it
)

var outcomeNames = [...]string{"served", "broken", "throttled", "unavailable", "hung"}

func (o outcome) String() string { return outcomeNames[o] }

// The providers of a run: the primary, which has the outage, and with
// --fallback a second one of K/2 slots that is never down.
const (
	primary  uint8 = 0
	fallback uint8 = 1
)

// The providers' hosts. A request goes to the provider its URL names.
const (
	primaryHost  = "api.sim"
	fallbackHost = "api2.sim"
)

// An attemptRecord is one attempt as the provider saw it. Times are offsets
// from the start of the run.
type attemptRecord struct {
	Req, Client int32
	Upstream    uint8         // the provider that saw it: primary, or fallback with --fallback
	Start, End  time.Duration // End: when the provider finished or answered, or the client gave up on a hang
	Outcome     outcome
	Admitted    bool // it held a slot, so it was billed
	Late        bool // admitted, and its client had given up on it before the provider finished: billed and unused
	Committed   bool // 200 headers reached a client that was still waiting
}

// provider is the fake API behind every client's RoundTripper: K slots,
// lognormal service times, and an outage window. It is shared by the
// clients of one run, and safe for concurrent use. With --fallback a run
// has a second one, the fallback, with K/2 slots, the same service time
// and no outage.
//
// An admitted attempt's service runs on a timer that the request's context
// does not stop: a provider keeps working, and billing, after the client has
// gone. Only channels and timers block, so that a synctest bubble sees every
// wait as durable and can move its clock.
type provider struct {
	sc       *scenario
	upstream uint8     // primary or fallback, for its records
	slots    int       // K, or the fallback's K/2
	outage   bool      // it has the scenario's outage: the primary does, the fallback not
	t0       time.Time // the run's start, in the bubble's clock
	raNow    bool      // Retry-After: the time to recovery
	raWait   time.Duration
	busy     sync.WaitGroup // admitted attempts still in service, and rejections still costing a slot

	mu       sync.Mutex // guards the fields below
	rng      *rand.Rand // service times and brownout draws, in admission order
	inFlight int        // slots held: admitted attempts, and in the storm shape rejections
	records  []attemptRecord
}

func newProvider(sc *scenario, seed uint64) *provider {
	accurate, d, _ := sc.retryAfterMode() // validated with the config
	return &provider{
		sc:       sc,
		upstream: primary,
		slots:    sc.Slots,
		outage:   true,
		t0:       time.Now(),
		raNow:    accurate,
		raWait:   d,
		rng:      rand.New(rand.NewPCG(seed, streamService)),
	}
}

// newFallbackProvider returns the fallback: K/2 slots, the primary's
// service time, never down. Its service times come from a stream of their
// own, so that the primary's draws are the same with it or without it,
// for as long as the same attempts reach the primary.
func newFallbackProvider(sc *scenario, seed uint64) *provider {
	return &provider{
		sc:       sc,
		upstream: fallback,
		slots:    sc.FallbackSlots(),
		t0:       time.Now(),
		rng:      rand.New(rand.NewPCG(seed, streamFallbackService)),
	}
}

// Streams of the run's PCG, one per use, so that a change in one does not
// shift the draws of another.
const (
	streamArrivals        = 1
	streamService         = 2
	streamFallbackService = 3
)

func (p *provider) now() time.Duration { return time.Since(p.t0) }

func (p *provider) inOutage(t time.Duration) bool {
	return p.outage && t >= p.sc.OutageStart && t < p.sc.OutageEnd()
}

// ticket is an attempt in progress.
type ticket struct {
	i       int
	outcome outcome
	done    chan struct{} // closed when an admitted attempt's service ends
}

// arrive decides what happens to an attempt arriving now, and records it.
func (p *provider) arrive(req, client int) *ticket {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	t := &ticket{i: len(p.records), outcome: served}
	rec := attemptRecord{Req: int32(req), Client: int32(client), Upstream: p.upstream, Start: now}
	slots := p.slots
	if p.inOutage(now) {
		switch p.sc.Shape {
		case "down", "layers", "storm":
			t.outcome = unavailable
		case "hang":
			t.outcome = hung
		case "brownout":
			if p.rng.Float64() < 0.5 {
				t.outcome = unavailable
			}
		case "capacity":
			slots = max(p.slots/4, 1)
		case "headers":
			t.outcome = broken
		}
	}
	if (t.outcome == served || t.outcome == broken) && p.inFlight >= slots {
		t.outcome = throttled
	}
	rec.Outcome = t.outcome
	switch t.outcome {
	case served, broken:
		p.admit(t, &rec)
	case throttled, unavailable:
		p.reject()
	}
	p.records = append(p.records, rec)
	return t
}

// reject makes a rejection hold a slot for the scenario's rejection cost,
// which is zero except in the storm shape. It takes the slot even when all
// K are held, so that a storm of rejections can crowd out admissions; the
// rejection is not admitted, and so not billed. p.mu is held.
func (p *provider) reject() {
	cost := p.sc.rejectionCost()
	if cost <= 0 {
		return
	}
	p.inFlight++
	p.busy.Add(1)
	time.AfterFunc(cost, func() {
		p.mu.Lock()
		p.inFlight--
		p.mu.Unlock()
		p.busy.Done()
	})
}

// admit takes a slot for t and starts its service. p.mu is held.
func (p *provider) admit(t *ticket, rec *attemptRecord) {
	rec.Admitted = true
	p.inFlight++
	p.busy.Add(1)
	service := time.Duration(float64(p.sc.Median) * math.Exp(p.sc.Sigma*p.rng.NormFloat64()))
	t.done = make(chan struct{})
	time.AfterFunc(service, func() {
		p.mu.Lock()
		p.inFlight--
		p.records[t.i].End = p.now()
		close(t.done)
		p.mu.Unlock()
		p.busy.Done()
	})
}

// end records when an attempt that was not admitted ended.
func (p *provider) end(t *ticket) {
	now := p.now()
	p.mu.Lock()
	p.records[t.i].End = now
	p.mu.Unlock()
}

// abandon records that the client gave up on an admitted attempt.
func (p *provider) abandon(t *ticket) {
	p.mu.Lock()
	p.records[t.i].Late = true
	p.mu.Unlock()
}

// commit records that t's 200 headers reached a waiting client.
func (p *provider) commit(t *ticket) {
	p.mu.Lock()
	p.records[t.i].Committed = true
	p.mu.Unlock()
}

// retryAfter returns the outage 503's Retry-After value, or "".
func (p *provider) retryAfter() string {
	switch {
	case p.raNow:
		left := p.sc.OutageEnd() - p.now()
		// RFC 9110 §10.2.3: delay-seconds is a whole number; round up so a
		// client that obeys it arrives after the recovery, not before.
		return strconv.Itoa(max(1, int(math.Ceil(left.Seconds()))))
	case p.raWait > 0:
		return strconv.Itoa(int(p.raWait / time.Second))
	}
	return ""
}

// wait blocks until every admitted attempt has finished its service.
func (p *provider) wait() { p.busy.Wait() }

// reqKey carries a logical request's number in its context, so that the
// provider can tie attempts to it through any library.
type reqKey struct{}

func withRequest(ctx context.Context, id int) context.Context {
	return context.WithValue(ctx, reqKey{}, id)
}

// conn is one client process's connection to the providers: an
// http.RoundTripper with no sockets, since network I/O would not let a
// synctest bubble's clock move. A request goes to the primary, or to the
// fallback if its URL names fallbackHost.
type conn struct {
	p      *provider
	fb     *provider // the fallback, or nil without --fallback
	client int
}

// RoundTrip sends one attempt to the provider its URL names.
func (c conn) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		// The server reads the request; RoundTrip must close it either way.
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		return nil, err // like http.Transport: a done request is never sent
	}
	p := c.p
	if req.URL.Host == fallbackHost {
		if p = c.fb; p == nil {
			return nil, errors.New("no fallback provider: run with --fallback")
		}
	}
	id, _ := ctx.Value(reqKey{}).(int)
	t := p.arrive(id, c.client)
	switch t.outcome {
	case throttled, unavailable:
		err := sleep(ctx, p.sc.RejectAfter)
		p.end(t)
		if err != nil {
			return nil, err
		}
		return p.rejection(req, t.outcome), nil
	case hung:
		<-ctx.Done()
		p.end(t)
		return nil, ctx.Err()
	}
	select {
	case <-t.done:
	case <-ctx.Done():
		p.abandon(t)
		return nil, ctx.Err()
	}
	p.commit(t)
	return success(req, t.outcome == broken), nil
}

// sleep waits d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// anthropicAPI reports whether req is for the Anthropic Messages API, whose
// bodies differ from OpenAI's.
func anthropicAPI(req *http.Request) bool { return strings.HasSuffix(req.URL.Path, "/messages") }

const (
	openaiOK      = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"hello"}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
	anthropicOK   = `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hello"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}`
	openai429     = `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	openai503     = `{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error","param":null,"code":null}}`
	anthropic429  = `{"type":"error","error":{"type":"rate_limit_error","message":"Number of concurrent connections has exceeded your rate limit."}}`
	anthropic503  = `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`
	brokenBodyLen = 16 // bytes of a broken body that arrive before it breaks
)

// rejection is a 429 or an outage 503 in the API's own error shape.
func (p *provider) rejection(req *http.Request, o outcome) *http.Response {
	code, body := http.StatusTooManyRequests, openai429
	if o == unavailable {
		code, body = http.StatusServiceUnavailable, openai503
	}
	if anthropicAPI(req) {
		body = anthropic429
		if o == unavailable {
			body = anthropic503
		}
	}
	resp := response(req, code, body)
	if o == unavailable {
		if ra := p.retryAfter(); ra != "" {
			resp.Header.Set("Retry-After", ra)
		}
	}
	return resp
}

// success is a 200 with the API's answer; broken makes its body fail after
// a few bytes, as a connection reset after the headers would.
func success(req *http.Request, broken bool) *http.Response {
	body := openaiOK
	if anthropicAPI(req) {
		body = anthropicOK
	}
	resp := response(req, http.StatusOK, body)
	if broken {
		resp.Body = io.NopCloser(io.MultiReader(strings.NewReader(body[:brokenBodyLen]), errReader{io.ErrUnexpectedEOF}))
	}
	return resp
}

func response(req *http.Request, code int, body string) *http.Response {
	return &http.Response{
		Status:        strconv.Itoa(code) + " " + http.StatusText(code),
		StatusCode:    code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
