package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outlast-llm/outlast/bench/internal/bufpool"
	"github.com/outlast-llm/outlast/cmd/outlast/cli"
	"github.com/outlast-llm/outlast/record"
	"github.com/outlast-llm/outlast/server"
)

const chatPath = "/v1/chat/completions"

// requestBodies returns the bodies the load generator sends, plain and
// streaming, with pad more bytes of prompt: the gateway reads and parses
// the whole body, where a bare proxy streams it through.
func requestBodies(pad int) [2][]byte {
	prompt := "Say something short." + strings.Repeat("x", pad)
	var out [2][]byte
	for i, stream := range []string{"false", "true"} {
		out[i] = []byte(`{"model":"bench-model","messages":[{"role":"user","content":"` + prompt + `"}],"stream":` + stream + `}`)
	}
	return out
}

// completion is the fake upstream's non-streaming answer: a ~300-byte
// OpenAI chat completion.
var completion = []byte(`{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench-model",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"The quick brown fox jumps over the lazy dog."},` +
	`"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":10,"total_tokens":22}}`)

var completionLength = []string{strconv.Itoa(len(completion))}

// upstream is the fake OpenAI API: it answers at once, so that what the
// benchmark measures is the layers in front of it.
type upstream struct {
	events [][]byte // the streamed answer, one event per chunk
	stream []byte   // the events joined: what a client reads
}

func newUpstream(chunks int) *upstream {
	u := &upstream{}
	for i := range chunks {
		u.events = append(u.events, fmt.Appendf(nil, `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk",`+
			`"created":1700000000,"model":"bench-model","choices":[{"index":0,"delta":{"content":"tok%d "},`+
			`"finish_reason":null}]}`+"\n\n", i))
	}
	u.events = append(u.events, []byte("data: [DONE]\n\n"))
	u.stream = bytes.Join(u.events, nil)
	return u
}

// reqBufs holds the buffers request bodies are read into, so that the
// upstream's own allocations stay out of the measurement.
var reqBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != chatPath {
		http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
		return
	}
	buf := reqBufs.Get().(*bytes.Buffer)
	defer reqBufs.Put(buf)
	buf.Reset()
	if _, err := buf.ReadFrom(io.LimitReader(r.Body, 2<<20)); err != nil {
		http.Error(w, `{"error":{"message":"bad body"}}`, http.StatusBadRequest)
		return
	}
	if !bytes.Contains(buf.Bytes(), []byte(`"stream":true`)) {
		h := w.Header()
		h["Content-Type"] = []string{"application/json"}
		h["Content-Length"] = completionLength
		w.Write(completion)
		return
	}
	h := w.Header()
	h["Content-Type"] = []string{"text/event-stream"}
	h["Cache-Control"] = []string{"no-cache"}
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for _, ev := range u.events {
		if _, err := w.Write(ev); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
	}
}

// upstreamTransport is the transport both proxies send through: the
// gateway's default (a clone of http.DefaultTransport, compression passed
// through, idle connections per host raised), so that the two differ only
// in what the gateway does.
func upstreamTransport(idle int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = idle
	t.DisableCompression = true
	return t
}

// newProxy returns the bare proxy. With pool, it copies bodies through
// pooled buffers, as the gateway does; without, through httputil's default
// of a new 32 KiB buffer per response, whose garbage the gateway would be
// credited for avoiding.
//
// It hands the transport a body that ends at the declared length; see
// sizedBody.
func newProxy(up *url.URL, idle int, pool bool) http.Handler {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(up)
			if n := pr.Out.ContentLength; n > 0 && pr.Out.Body != nil {
				pr.Out.Body = &sizedBody{rc: pr.Out.Body, left: n}
			}
		},
		Transport: upstreamTransport(idle),
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	if pool {
		rp.BufferPool = &bufpool.Pool{}
	}
	return rp
}

// sizedBody is an inbound request body that reports io.EOF once its
// declared length is read, without reading the server's body again.
//
// Having sent a body of known length, http.Transport reads once more to
// check that it was not longer. With the server's own body, that read can
// come after the upstream has answered and the proxy has begun its
// response, which makes the HTTP/1 server drain and close the inbound body
// (golang/go#15527). The read then fails, the transport closes its
// connection to the upstream, and a stream still being copied is cut: the
// client gets "unexpected EOF" (golang/go#40747). The server's body already
// enforces the declared length, so this extra read can only see its end.
type sizedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *sizedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if err == io.EOF && b.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *sizedBody) Close() error { return b.rc.Close() }

// newGateway returns the gateway as outlast serve runs it with args and
// its defaults for the rest (server.New with cli.ServeConfig): the retry
// policy, the admission, the deadline, the metrics and page, and its log
// line per request, written as JSON to a pipe that a goroutine drains, as
// serve's stderr goes to a log collector. The transport is the one the
// bare proxy has, which is serve's default with --upstream-idle
// connections per host; obs, if set, is told of each request.
func newGateway(up *url.URL, idle int, obs record.Observer, args ...string) (_ *server.Server, closeLog func(), err error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		io.Copy(io.Discard, pr)
	}()
	closePipe := func() {
		pw.Close()
		<-drained
		pr.Close()
	}
	defer func() {
		if err != nil {
			closePipe()
		}
	}()
	cfg, flushLog, err := cli.ServeConfig(append([]string{"--upstream", up.String()}, args...), pw)
	if err != nil {
		return nil, nil, err
	}
	cfg.Gateway.Transport = upstreamTransport(idle)
	cfg.Observer = obs
	srv, err := server.New(context.Background(), cfg)
	if err != nil {
		return nil, nil, err
	}
	return srv, func() { flushLog(); closePipe() }, nil
}

// maxConns is the gateway's --max-conns: above the connections the load
// generator may hold, --inflight and as many closing, as an operator
// sizes it for the callers (serve's default is 1,024).
func maxConns(c config) []string {
	return []string{"--max-conns", strconv.Itoa(2*c.InFlight + 64)}
}

// loopback is one handler on its own loopback listener.
type loopback struct {
	url  *url.URL
	stop func()
	errc chan error
}

// selfServer is a handler that serves a listener itself, as outlast serve
// serves the gateway: with its connection bound and timeouts.
type selfServer interface {
	Serve(ctx context.Context, l net.Listener) error
}

// serveLoopback serves h on a loopback port: by h's own Serve if it has
// one, or else by an http.Server.
func serveLoopback(h http.Handler) (*loopback, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening on loopback: %w", err)
	}
	s := &loopback{url: &url.URL{Scheme: "http", Host: l.Addr().String()}, errc: make(chan error, 1)}
	if own, ok := h.(selfServer); ok {
		ctx, cancel := context.WithCancel(context.Background())
		s.stop = cancel
		go func() { s.errc <- own.Serve(ctx, l) }()
		return s, nil
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	s.stop = func() { srv.Close() }
	go func() { s.errc <- srv.Serve(l) }()
	return s, nil
}

// close stops the server: every request has ended by the time the
// benchmark closes its servers.
func (s *loopback) close() error {
	s.stop()
	if err := <-s.errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// stack is the upstream and the servers in front of it, each a target.
type stack struct {
	upstream *upstream
	servers  []*loopback
	targets  []*target
	cleanup  []func()  // run by close, after the servers
	deployed *deployed // the targets' processes, with --deployed
}

// variant is one of the gateway's targets: outlast serve with args.
type variant struct {
	name string
	args []string
}

// gateways returns the gateway targets c asks for, but the one with its
// journal, which each kind of stack adds its own way.
func gateways(c config) []variant {
	gws := []variant{{"gateway", []string{"--journal", "off"}}}
	if c.GateSlots > 0 {
		gws = append(gws, variant{"gateway+gate", []string{"--journal", "off", "--slots", strconv.Itoa(c.GateSlots)}})
	}
	if c.Redis != "" {
		gws = append(gws, variant{"gateway+redis", []string{"--journal", "off", "--slots", strconv.Itoa(max(c.GateSlots, 1)), "--redis", c.Redis}})
	}
	if len(c.ServeArgs) > 0 {
		gws = append(gws, variant{"gateway+args", append([]string{"--journal", "off"}, c.ServeArgs...)})
	}
	return gws
}

func newStack(ctx context.Context, c config, stderr io.Writer) (_ *stack, err error) {
	s := &stack{upstream: newUpstream(c.Chunks)}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if c.Deployed {
		return s, s.deploy(ctx, c, stderr)
	}
	up, err := s.add("direct", s.upstream, c)
	if err != nil {
		return nil, err
	}
	if _, err := s.add("proxy", newProxy(up.url, c.UpIdle, c.ProxyPool), c); err != nil {
		return nil, err
	}
	for _, gw := range gateways(c) {
		g, closeLog, err := newGateway(up.url, c.UpIdle, record.Observer{}, append(gw.args, maxConns(c)...)...)
		if err != nil {
			return nil, err
		}
		s.cleanup = append(s.cleanup, func() { g.Close(context.Background()); closeLog() })
		if _, err := s.add(gw.name, g, c); err != nil {
			return nil, err
		}
	}
	if c.Journal {
		if err := s.addJournal(up.url, c); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// deploy starts every target as a process of its own (see deployed).
// The gateway with its journal runs serve's default journal, SQLite
// written by a child process, with no flag for it.
func (s *stack) deploy(ctx context.Context, c config, stderr io.Writer) error {
	d, err := newDeployed(ctx, stderr)
	if err != nil {
		return err
	}
	s.deployed = d
	up, err := d.child(ctx, "upstream", "--chunks", strconv.Itoa(c.Chunks))
	if err != nil {
		return err
	}
	s.addTarget("direct", up, c)
	proxy, err := d.child(ctx, "proxy", "--upstream", up.String(),
		"--upstream-idle", strconv.Itoa(c.UpIdle), "--proxy-pool="+strconv.FormatBool(c.ProxyPool))
	if err != nil {
		return err
	}
	s.addTarget("proxy", proxy, c)
	gws := gateways(c)
	if c.Journal {
		var args []string
		if !c.JournalProc {
			args = []string{"--journal-writer", server.WriterInline}
		}
		gws = append(gws, variant{"gateway+journal", args})
	}
	for _, gw := range gws {
		u, err := d.serve(ctx, gw.name, append(append([]string{"--upstream", up.String()}, gw.args...), maxConns(c)...)...)
		if err != nil {
			return err
		}
		s.addTarget(gw.name, u, c)
	}
	return nil
}

// addJournal adds the gateway with its embedded journal: SQLite in a
// temporary folder, written through the batch writer, as outlast serve
// runs it by default. Each round ends by flushing the writer.
func (s *stack) addJournal(up *url.URL, c config) error {
	dir, err := os.MkdirTemp("", "outlast-load-")
	if err != nil {
		return err
	}
	s.cleanup = append(s.cleanup, func() { os.RemoveAll(dir) })
	writer := server.WriterInline
	if c.JournalProc {
		writer = server.WriterProcess
	}
	// The gateway adds a request's record after writing its response, so
	// the client may be done before the record is added: the drain waits
	// for each one begun to be recorded.
	var recorded atomic.Int64
	wake := make(chan struct{}, 1)
	counter := record.Observer{Done: func(*record.Request) {
		recorded.Add(1)
		select {
		case wake <- struct{}{}:
		default:
		}
	}}
	g, closeLog, err := newGateway(up, c.UpIdle, counter, append([]string{"--journal", "sqlite:" + filepath.Join(dir, "journal.db"), "--journal-writer", writer}, maxConns(c)...)...)
	if err != nil {
		return err
	}
	// Cleanups run in order: the gateway's journal closes before its
	// folder goes.
	s.cleanup = append([]func(){func() { g.Close(context.Background()); closeLog() }}, s.cleanup...)
	if _, err := s.add("gateway+journal", g, c); err != nil {
		return err
	}
	// The writes a round's requests leave behind are that round's cost:
	// wait (up to a second) for every request begun to be recorded, and
	// write them.
	t := s.targets[len(s.targets)-1]
	t.drain = func(ctx context.Context) error {
		timeout := time.NewTimer(time.Second)
		defer timeout.Stop()
		for recorded.Load() < t.sent.Load() {
			select {
			case <-wake:
			case <-timeout.C:
				return g.Writer.Flush(ctx)
			}
		}
		return g.Writer.Flush(ctx)
	}
	return nil
}

func (s *stack) add(name string, h http.Handler, c config) (*loopback, error) {
	srv, err := serveLoopback(h)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	s.servers = append(s.servers, srv)
	s.addTarget(name, srv.url, c)
	return srv, nil
}

// addTarget adds the target named name, served at u.
func (s *stack) addTarget(name string, u *url.URL, c config) {
	s.targets = append(s.targets, newTarget(name, u.String()+chatPath, s.upstream, requestBodies(c.PromptBytes), c))
}

func (s *stack) close() error {
	var errs []error
	for _, t := range s.targets {
		t.client.CloseIdleConnections()
	}
	for _, srv := range s.servers {
		errs = append(errs, srv.close())
	}
	for _, f := range s.cleanup {
		f()
	}
	if s.deployed != nil {
		errs = append(errs, s.deployed.close())
	}
	return errors.Join(errs...)
}

// sampleCost reads the totals so far, as the package's sampleCost does,
// with the CPU time of the targets' processes, when deployed, added to
// this process's.
func (s *stack) sampleCost() cost {
	c := sampleCost()
	if s.deployed != nil {
		t, each, ok := s.deployed.cpu()
		c.cpu += t
		c.cpuOK = c.cpuOK && ok
		c.procs = each
	}
	return c
}

// target returns the target named name, or nil.
func (s *stack) target(name string) *target {
	for _, t := range s.targets {
		if t.name == name {
			return t
		}
	}
	return nil
}

// names returns the targets' names, in order.
func (s *stack) names() []string {
	n := make([]string, len(s.targets))
	for i, t := range s.targets {
		n[i] = t.name
	}
	return n
}
