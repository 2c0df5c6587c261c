package reliability_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gate"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/internal/sse"
	"github.com/outlast-llm/outlast/mockllm"
	"github.com/outlast-llm/outlast/record"
)

// A path is one way a caller reaches the upstream: through the library's
// Transport or through the gateway, asking for a stream or not.
type path struct {
	gateway bool
	stream  bool
}

// paths are the matrix's columns, in the table's order.
var paths = [4]path{{false, false}, {false, true}, {true, false}, {true, true}}

// String is the path's column heading.
func (p path) String() string {
	layer, kind := "Transport", "non-stream"
	if p.gateway {
		layer = "gateway"
	}
	if p.stream {
		kind = "stream"
	}
	return layer + ", " + kind
}

// id is the path's subtest name.
func (p path) id() string {
	return strings.ReplaceAll(strings.ToLower(p.String()), ", ", "-")
}

// quiet discards the retry and request log lines of every cell.
var quiet = slog.New(slog.DiscardHandler)

// A cell is one fault on one path: the upstream with the fault, the
// caller's client, and what each side counted. The upstream is a mockllm
// server, behind a Toxiproxy proxy when the fault is the network's.
type cell struct {
	t      *testing.T
	f      fault
	p      path
	mock   *mockllm.Server
	proxy  *toxiproxy.Proxy // nil unless the fault needs one
	target string           // the upstream's base URL: the proxy's or the mock's
	client *http.Client     // the caller's
	base   string           // where the caller sends: the gateway or the target

	refused  atomic.Int64  // dials the kernel refused: attempts that no server saw
	changed  chan struct{} // signalled when the upstream's count may have grown
	queued   chan struct{} // one per request that joined a gate's queue
	failures chan struct{} // one per failed attempt

	mu       sync.Mutex          // guards requests
	requests map[string]*request // by Outlast-Run, for the gateway's observer
}

func newCell(t *testing.T, f fault, p path) *cell {
	c := &cell{
		t: t, f: f, p: p,
		changed:  make(chan struct{}, 1),
		queued:   make(chan struct{}, 64),
		failures: make(chan struct{}, 64),
		requests: map[string]*request{},
	}
	c.startUpstream()
	if p.gateway {
		c.startGateway()
	} else {
		c.startTransport()
	}
	return c
}

// startUpstream starts the mock with the fault's script and, for a
// network fault, the proxy in front of it.
func (c *cell) startUpstream() {
	script := c.f.script
	if script == "" {
		script = "ok"
	}
	c.mock = &mockllm.Server{
		Script: mockllm.MustParseScript(script),
		Chunks: c.f.chunks,
		// Logf is told of every model request once the mock has counted
		// it: the event that awaitUpstream waits for.
		Logf: func(string, ...any) { c.signal(c.changed) },
	}
	if err := c.mock.Start(""); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(c.mock.Close)
	c.target = c.mock.URL
	switch {
	case c.f.proxied || c.f.down:
		c.proxy = newProxy(c.t, quietAddr(c.t), c.mock.URL, c.f.toxic)
		c.target = proxyURL(c.proxy)
	case c.f.toxic != nil:
		c.proxy = newProxy(c.t, "127.0.0.1:0", c.mock.URL, c.f.toxic)
		c.target = proxyURL(c.proxy)
	}
	if c.f.down {
		// Nothing listens on the port any more: the kernel refuses.
		c.proxy.Stop()
	}
}

// policy allows three attempts: without a deadline, the list of waits is
// the bound.
func (c *cell) policy() *outlast.Policy {
	w := c.f.wait
	if w == 0 {
		w = policyWait
	}
	return &outlast.Policy{Waits: []time.Duration{w, w}}
}

func (c *cell) firstByteTimeout() time.Duration {
	if c.f.firstByte > 0 {
		return c.f.firstByte
	}
	return longFirstByte
}

// upstreamTransport is what sends the attempts to the upstream, for the
// Transport and the gateway alike. Its dialer counts refused connections,
// which reach no server that could count them.
func (c *cell) upstreamTransport() *http.Transport {
	tr := &http.Transport{DialContext: c.dial, DisableCompression: true}
	c.t.Cleanup(tr.CloseIdleConnections)
	return tr
}

func (c *cell) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if errors.Is(err, syscall.ECONNREFUSED) {
		c.refused.Add(1)
		c.signal(c.changed)
	}
	return conn, err
}

func (c *cell) startTransport() {
	var g outlast.Gate // a nil interface, not a nil *gate.Gate, without slots
	if c.f.slots > 0 {
		g = gate.New(c.f.slots, 8)
	}
	c.client = &http.Client{Transport: &outlast.Transport{
		Base:             c.upstreamTransport(),
		Policy:           c.policy(),
		Gate:             g,
		FirstByteTimeout: c.firstByteTimeout(),
		Logger:           quiet,
	}}
	c.base = c.target
}

func (c *cell) startGateway() {
	u, err := url.Parse(c.target)
	if err != nil {
		c.t.Fatal(err)
	}
	g, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{{
			URL:              u,
			Policy:           c.policy(),
			Slots:            c.f.slots,
			FirstByteTimeout: c.firstByteTimeout(),
			IdleTimeout:      idleTimeout,
		}},
		Transport: c.upstreamTransport(),
		Logger:    quiet,
		Observer:  c.observer(),
	})
	if err != nil {
		c.t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	c.t.Cleanup(srv.Close)
	caller := &http.Transport{DisableCompression: true}
	c.t.Cleanup(caller.CloseIdleConnections)
	c.client = &http.Client{Transport: caller}
	c.base = srv.URL
}

// observer tells each request of the gateway's record of it, found by
// its Outlast-Run.
func (c *cell) observer() record.Observer {
	return record.Observer{
		Queued:       func(*record.Request, string, int) { c.signal(c.queued) },
		AttemptStart: func(r *record.Request, _ record.Attempt) { c.request(r.Run).start() },
		AttemptEnd: func(_ *record.Request, a record.Attempt) {
			if a.Class != outlast.ClassNone {
				c.signal(c.failures)
			}
		},
		Done: func(r *record.Request) { c.request(r.Run).finish(slices.Clone(r.Attempts), r.Status, r.Error) },
	}
}

// hooks tell r of the Transport's attempts at it.
func (c *cell) hooks(r *request) outlast.Hooks {
	return outlast.Hooks{
		Queued:       func(string, int) { c.signal(c.queued) },
		AttemptStart: func(outlast.Attempt) { r.start() },
		AttemptEnd: func(a outlast.Attempt) {
			r.end(record.NewAttempt(a))
			if a.Err != nil {
				c.signal(c.failures)
			}
		},
	}
}

// signal sends on ch without blocking: changed has room for one signal,
// which is all a waiter that looks again needs, and the counted channels
// have room for more than any cell sends.
func (c *cell) signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (c *cell) request(run string) *request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests[run]
}

// await waits for n signals on ch, failing the cell after 10 s.
func (c *cell) await(ch <-chan struct{}, n int, what string) {
	c.t.Helper()
	timeout := time.After(10 * time.Second)
	for range n {
		select {
		case <-ch:
		case <-timeout:
			c.t.Fatalf("waited 10s for %d %s", n, what)
		}
	}
}

// upstreamSaw is what reached the upstream: the requests the mock
// counted, and the connections the kernel refused on its behalf.
func (c *cell) upstreamSaw() int {
	return c.mock.Stats().Total + int(c.refused.Load())
}

// awaitUpstream waits, up to 10 s, until the upstream has seen n
// attempts, and returns what it saw. A request can reach the mock after
// its attempt ended (a proxy forwards what it read before the caller
// hung up), so the count is awaited, not read once.
func (c *cell) awaitUpstream(n int) int {
	timeout := time.After(10 * time.Second)
	for {
		got := c.upstreamSaw()
		if got >= n {
			return got
		}
		select {
		case <-c.changed:
		case <-timeout:
			return got
		}
	}
}

// A request is one call by the caller, with what the record and the
// caller saw of it.
type request struct {
	run  string
	done chan struct{} // closed when the record is complete

	mu          sync.Mutex // guards the record's fields, set by hooks and observers
	started     int
	attempts    []record.Attempt
	recStatus   int    // the gateway's record of the status
	recError    string // and of the error's kind
	atFirstByte int    // attempts started when the caller read its first body byte; -1 before

	// What the caller saw, set by send.
	status int
	header http.Header
	err    error
	ending string // how the body ended: "", "cut", "stalled" or "error event"
}

func (r *request) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started++
}

func (r *request) end(a record.Attempt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts = append(r.attempts, a)
}

func (r *request) finish(attempts []record.Attempt, status int, kind string) {
	r.mu.Lock()
	r.attempts, r.recStatus, r.recError = attempts, status, kind
	r.mu.Unlock()
	close(r.done)
}

func (r *request) firstByte() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.atFirstByte = r.started
}

// send makes one request as the caller, reads the answer as a caller
// with a read timeout does, and returns what it saw. It is safe to call
// from a goroutine of the cell's own.
func (c *cell) send(run string) *request {
	r := &request{run: run, done: make(chan struct{}), atFirstByte: -1}
	c.mu.Lock()
	c.requests[run] = r
	c.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !c.p.gateway {
		ctx = outlast.WithHooks(ctx, c.hooks(r))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/chat/completions", strings.NewReader(c.body()))
	if err != nil {
		// Errorf, not Fatal: send may run in a goroutine of its own.
		c.t.Errorf("%s: %v", run, err)
		r.err = err
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	if c.p.gateway {
		req.Header.Set(gateway.HeaderRun, run)
	}
	resp, err := c.client.Do(req)
	if !c.p.gateway {
		// The Transport reports the last attempt's end before RoundTrip
		// returns: its record is complete.
		close(r.done)
	}
	if err != nil {
		r.err = err
		return r
	}
	r.status, r.header = resp.StatusCode, resp.Header
	r.ending = read(r, resp.Body, cancel)
	return r
}

func (c *cell) body() string {
	if c.p.stream {
		return `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	}
	return `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
}

// read reads body to its end, and says how it ended: "" for a clean end,
// "error event" for a clean end whose events include an error, "stalled"
// when the caller's own read timeout (callerPatience without a byte)
// gave up, which cancel carries out, and "cut" for any other failure.
func read(r *request, body io.ReadCloser, cancel context.CancelFunc) string {
	defer body.Close()
	var gaveUp atomic.Bool
	timer := time.AfterFunc(callerPatience, func() { gaveUp.Store(true); cancel() })
	defer timer.Stop()
	var got bytes.Buffer
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if got.Len() == 0 {
				r.firstByte()
			}
			got.Write(buf[:n])
			timer.Reset(callerPatience)
		}
		switch {
		case err == io.EOF && hasErrorEvent(got.Bytes()):
			return "error event"
		case err == io.EOF:
			return ""
		case err != nil && gaveUp.Load():
			return "stalled"
		case err != nil:
			return "cut"
		}
	}
}

// hasErrorEvent reports whether a stream holds an error event, as the one
// SSE scanner reads it: "event: error", or an error object as data, as
// OpenAI sends one mid-stream.
func hasErrorEvent(stream []byte) bool {
	blocks, _ := sse.Split(stream)
	for i := range blocks {
		if blocks[i].HasData && sse.IsFailure(&blocks[i].Event) {
			return true
		}
	}
	return false
}

// outcome is the request's cell text: the attempts the caller is told of
// (the Transport's hooks, the gateway's Outlast-Attempts, or the
// gateway's record when the caller got no response at all), then the
// status and the gateway's Outlast-Error kind, or the Transport's error
// as outlast.Classify names it, then how the body ended.
func (r *request) outcome(p path) string {
	n := strconv.Itoa(len(r.attempts))
	if p.gateway && r.err == nil {
		n = r.header.Get(gateway.HeaderAttempts)
	}
	got := "error: " + outlast.Classify(r.err).String()
	if r.err == nil {
		got = strconv.Itoa(r.status)
		if kind := r.header.Get(gateway.HeaderError); kind != "" {
			got += " " + kind
		}
	}
	if r.ending != "" {
		got += ", " + r.ending
	}
	return n + " → " + got
}

// check asserts what must hold of every request, whatever its fault: the
// record is whole, nothing was sent after the commit point, and the
// gateway's headers agree with its record.
func (c *cell) check(r *request) {
	c.t.Helper()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		c.t.Errorf("%s: the record did not finish in 10s", r.run)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started != len(r.attempts) {
		c.t.Errorf("%s: got %d attempts started and %d in the record, want as many", r.run, r.started, len(r.attempts))
	}
	if r.atFirstByte >= 0 && r.atFirstByte != r.started {
		c.t.Errorf("%s: got %d attempts started after the caller's first byte, want 0 (the commit point)", r.run, r.started-r.atFirstByte)
	}
	if c.p.gateway {
		c.checkGateway(r)
	}
	if c.f.honours {
		c.checkDelays(r)
	}
}

// checkGateway asserts that what the caller was told matches the record.
func (c *cell) checkGateway(r *request) {
	c.t.Helper()
	if r.err != nil {
		return // the caller got no response, so no headers to compare
	}
	if got, want := r.header.Get(gateway.HeaderAttempts), strconv.Itoa(len(r.attempts)); got != want {
		c.t.Errorf("%s: got Outlast-Attempts %q, want the record's %s", r.run, got, want)
	}
	if r.recStatus != r.status {
		c.t.Errorf("%s: got status %d in the record, want the caller's %d", r.run, r.recStatus, r.status)
	}
	if kind := r.header.Get(gateway.HeaderError); kind != "" && r.recError != kind {
		c.t.Errorf("%s: got error %q in the record, want the caller's Outlast-Error %q", r.run, r.recError, kind)
	}
	// The gateway's policy ran: a client that retried the failure would
	// multiply the attempts.
	if got := r.header.Get("X-Should-Retry"); r.status >= 400 && got != "false" {
		c.t.Errorf("%s: got X-Should-Retry %q on a %d, want false", r.run, got, r.status)
	}
}

// checkDelays asserts that each retry waited at least the delay the
// server asked for.
func (c *cell) checkDelays(r *request) {
	c.t.Helper()
	for _, a := range r.attempts[:max(len(r.attempts)-1, 0)] {
		if a.RetryAfter <= 0 || a.RetryIn < a.RetryAfter {
			c.t.Errorf("%s: attempt %d: got a wait of %v after a server delay of %v, want a delay and a wait at least as long", r.run, a.N, a.RetryIn, a.RetryAfter)
		}
	}
}

// checkUpstream asserts that the record's attempts, over every request,
// are what the upstream saw.
func (c *cell) checkUpstream(reqs ...*request) {
	c.t.Helper()
	want := 0
	for _, r := range reqs {
		r.mu.Lock()
		want += len(r.attempts)
		r.mu.Unlock()
	}
	if got := c.awaitUpstream(want); got != want {
		c.t.Errorf("got %d requests at the upstream (%d at the mock, %d refused), want the record's %d attempts", got, c.mock.Stats().Total, c.refused.Load(), want)
	}
}

// once is a cell of one request.
func (c *cell) once() string {
	r := c.send("once")
	c.check(r)
	c.checkUpstream(r)
	return r.outcome(c.p)
}

// restart is the upstream restarting while requests wait at its only
// slot: one request holds the slot, behind more queue behind it, then
// the upstream goes down (the held attempt is cut and each queued one is
// refused in turn) and comes back before any retry. Every step waits on
// the event before it; only the retries' wait (fault.wait) races the
// restart, and it is a second against a few milliseconds of work.
func (c *cell) restart(behind int) string {
	reqs := make([]*request, 1+behind)
	var wg sync.WaitGroup
	wg.Go(func() { reqs[0] = c.send("held") })
	if c.awaitUpstream(1) < 1 {
		c.t.Fatal("the held request did not reach the upstream in 10s")
	}
	for i := 1; i <= behind; i++ {
		wg.Go(func() { reqs[i] = c.send(fmt.Sprintf("queued-%d", i)) })
		c.await(c.queued, 1, "queued requests")
	}
	c.proxy.Stop()
	c.await(c.failures, 1+behind, "failed attempts (the held one cut, the queued ones refused)")
	if err := c.proxy.Start(); err != nil {
		c.t.Fatal(err)
	}
	wg.Wait()
	outcomes := make([]string, len(reqs))
	for i, r := range reqs {
		c.check(r)
		outcomes[i] = r.outcome(c.p)
	}
	c.checkUpstream(reqs...)
	if len(slices.Compact(slices.Clone(outcomes))) == 1 {
		return fmt.Sprintf("%d requests, each %s", len(reqs), outcomes[0])
	}
	return strings.Join(outcomes, "; ")
}
