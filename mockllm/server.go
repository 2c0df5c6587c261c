package mockllm

import (
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// defaultChunks is the number of content chunks when Server.Chunks is
// zero: the nine words of "The quick brown fox jumps over the lazy dog."
const defaultChunks = 9

// maxBody bounds the request bodies the server reads.
const maxBody = 16 << 20

// A Server is a fake LLM provider that fails as its Script says. It
// speaks OpenAI's chat completions, Anthropic's messages and llama.cpp's
// completion, streaming and not; see the package documentation.
//
// Set the fields, then call Start; NewServer does both for a test. The
// fields must not change after Start. The zero value is a Server whose
// every request succeeds, with no slot limit. A started Server's methods
// are safe for concurrent use.
type Server struct {
	// Script is the faults the server applies to model requests. The
	// zero Script has no steps: every request succeeds.
	Script Script

	// Slots is how many model requests the server serves at once, like
	// llama.cpp's --parallel: a request holds a slot for its whole
	// response, and the others wait in arrival order. GET /slots lists
	// them and llama.cpp's id_slot picks one. Zero means no limit, and
	// GET /slots answers 501, as llama.cpp does without slots.
	Slots int

	// Capacity is how many completions the server generates at once, as
	// a provider's capacity: a model request that would generate while
	// Capacity others do gets 429 with the API's rate-limit error and no
	// Retry-After, counted as "over-capacity", as an overloaded provider
	// answers. It applies before Slots. Zero means no limit.
	Capacity int

	// Chunks is how many content chunks a response has: stream events,
	// or parts of a body. Zero means 9.
	Chunks int

	// ChunkDelay is the wait before each content chunk; a non-streaming
	// response waits for all its chunks before it is sent. Zero means no
	// wait.
	ChunkDelay time.Duration

	// FromFirstRequest makes the script's clock start at the first model
	// request rather than at Start, so that a host that is slow to start
	// does not miss a window. The first step becomes current when the
	// first request to a model endpoint arrives, the first request that
	// Stats counts; GET /health, GET /slots and GET /mock/stats do not
	// start it, and until then GET /health answers as the first step
	// says. A script whose first step is a refuse step starts at Start
	// regardless, since a closed socket cannot wait for a request, and
	// its later steps follow on from it as usual. It matters only when
	// the first step is a window: counted steps do not depend on the
	// clock. False means the first step becomes current at Start.
	FromFirstRequest bool

	// Limits rate-limits model requests per API key, with the
	// providers' rate-limit headers on every answer. The zero Limits
	// limits nothing.
	Limits Limits

	// RefusePrefill makes the server refuse, as some models do, a chat
	// request whose last message is the assistant's (a prefill): it gets
	// 400 in the API's error shape, whatever the step, unless the step
	// refuses connections. The refuse-prefill parameter does the same for
	// one step. False means a prefill is continued (see the package
	// documentation).
	RefusePrefill bool

	// ResumeWindow is how long after its creation a background response
	// of the Responses API ("background": true) can be had again from
	// GET /v1/responses/{id}, streamed or not, or cancelled; past it, the
	// server answers 404. Zero means 5 minutes, about OpenAI's window.
	ResumeWindow time.Duration

	// Logf, if not nil, is told about each model request and what the
	// script did to it, and about errors the server hit. It may be
	// called concurrently.
	Logf func(format string, args ...any)

	// URL is the server's base URL, as http://127.0.0.1:PORT, set by
	// Start. It stays the same across refuse steps.
	URL string

	ln     *listener
	sched  *schedule
	slots  *slots // nil if Slots is 0
	srv    *http.Server
	done   chan struct{} // closed by Close, to end waits and stalls
	served chan struct{} // closed when srv.Serve returns
	seq    atomic.Int64  // completions begun: their ids, and llama.cpp's tasks

	store      store        // background responses, for GET /v1/responses/{id}
	generating atomic.Int64 // completions being generated, for Capacity
	limits     limiter      // each key's allowances, for Limits
	peak       atomic.Int64 // the most generating at once

	mu       sync.Mutex // guards started, closed and the handlers' Add
	started  bool
	closed   bool
	handlers sync.WaitGroup // running handlers, waited for by Close

	statsMu sync.Mutex // guards total and paths
	total   int
	paths   map[string]map[string]int
}

// Stats are the model requests a Server has seen: in total, and by path
// and outcome. An outcome is "ok", a status such as "502", the name of
// the fault (as "reset" or "stall-after"), or "refused".
//
// Connections refused during a refuse step never reach the server and
// are not counted: the kernel refuses them. "refused" counts only the
// requests that came during the step on a connection opened before it;
// the server resets them.
type Stats struct {
	// Total is the number of model requests.
	Total int `json:"total"`
	// Generating counts the completions being generated now, and Peak
	// the most at once since Start: what a provider's capacity bounds.
	Generating int `json:"generating"`
	Peak       int `json:"peak"`
	// Paths maps each path to the number of requests per outcome. It
	// also counts, under "/v1/responses/{id}" and
	// "/v1/responses/{id}/cancel", the background responses fetched
	// ("get", or "stream" when streamed again; "404" past the window) and
	// cancelled ("cancelled"), which generate nothing and are not in
	// Total.
	Paths map[string]map[string]int `json:"paths"`
}

// NewServer parses script and starts a Server for it on a loopback port,
// for a test, as httptest.NewServer does. It panics if the script does
// not parse or the server cannot listen. Call Close when done.
func NewServer(script string) *Server {
	s := &Server{Script: MustParseScript(script)}
	if err := s.Start(""); err != nil {
		panic(err)
	}
	return s
}

// Start listens on addr ("127.0.0.1:0" if empty), sets URL, and serves
// in the background until Close. The script's first step becomes current
// now, or with FromFirstRequest at the first model request.
func (s *Server) Start(addr string) error {
	if s.Slots < 0 || s.Chunks < 0 || s.ChunkDelay < 0 {
		return fmt.Errorf("mockllm: Slots %d, Chunks %d and ChunkDelay %v cannot be negative", s.Slots, s.Chunks, s.ChunkDelay)
	}
	if l := s.Limits; l.Requests < 0 || l.Tokens < 0 || l.Window < 0 {
		return fmt.Errorf("mockllm: Limits %+v: requests, tokens and window cannot be negative", l)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("mockllm: server already started")
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := listen(addr)
	if err != nil {
		return fmt.Errorf("mockllm: %w", err)
	}
	s.started = true
	s.ln = ln
	s.URL = "http://" + ln.Addr().String()
	s.sched = newSchedule(s.Script, ln.setRefusing, s.Logf)
	s.limits.l = s.Limits
	if s.Slots > 0 {
		s.slots = newSlots(s.Slots)
	}
	s.store.window = s.ResumeWindow
	if s.store.window <= 0 {
		s.store.window = defaultResumeWindow
	}
	s.done = make(chan struct{})
	s.served = make(chan struct{})
	s.paths = map[string]map[string]int{}
	s.srv = &http.Server{
		Handler:           s.routes(),
		ConnState:         ln.connState,
		ReadHeaderTimeout: time.Minute,
		ErrorLog:          log.New(logWriter{s}, "", 0),
	}
	s.sched.start(time.Now(), s.FromFirstRequest)
	go func() {
		defer close(s.served)
		s.srv.Serve(ln)
	}()
	return nil
}

// Close stops the server: it ends every response in progress, closes
// every connection, and returns when every handler has returned. It may
// be called more than once.
func (s *Server) Close() {
	s.mu.Lock()
	if !s.started || s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()

	s.sched.close()
	close(s.done)
	s.srv.Close()
	s.ln.Close() // in case Serve had not started to track it
	<-s.served
	s.handlers.Wait()
}

// Stats returns the model requests the server has seen so far.
func (s *Server) Stats() Stats {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	st := Stats{Total: s.total, Paths: make(map[string]map[string]int, len(s.paths)), Generating: int(s.generating.Load()), Peak: int(s.peak.Load())}
	for p, o := range s.paths {
		st.Paths[p] = maps.Clone(o)
	}
	return st
}

func (s *Server) count(path, outcome string) {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	s.total++
	s.countLocked(path, outcome)
}

// countOther counts a request that generates nothing (a background
// response fetched or cancelled) in Paths, but not in Total.
func (s *Server) countOther(path, outcome string) {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	s.countLocked(path, outcome)
}

func (s *Server) countLocked(path, outcome string) {
	if s.paths[path] == nil {
		s.paths[path] = map[string]int{}
	}
	s.paths[path][outcome]++
}

func (s *Server) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
	}
}

// logWriter sends the http.Server's own errors to Logf.
type logWriter struct{ s *Server }

func (w logWriter) Write(p []byte) (int, error) {
	w.s.logf("mockllm: %s", strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// enter counts a handler in, unless the server is closing.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.handlers.Add(1)
	return true
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.model(openAI{}))
	mux.HandleFunc("POST /v1/messages", s.model(anthropic{}))
	mux.HandleFunc("POST /completion", s.model(llamaCPP{}))
	mux.HandleFunc("POST /v1/responses", s.model(responses{}))
	mux.HandleFunc("GET /v1/responses/{id}", s.retrieve)
	mux.HandleFunc("POST /v1/responses/{id}/cancel", s.cancel)
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /slots", s.listSlots)
	mux.HandleFunc("GET /mock/stats", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, js(s.Stats()))
	})
	mux.HandleFunc("/", notFound)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.enter() {
			return
		}
		defer s.handlers.Done()
		mux.ServeHTTP(w, r)
	})
}

// health is llama.cpp's GET /health: it fails while a loading step is
// current, without using the step.
func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	if s.sched.peek(time.Now()).fault == faultLoading {
		writeJSON(w, http.StatusServiceUnavailable, loadingBody())
		return
	}
	writeJSON(w, http.StatusOK, []byte(`{"status":"ok"}`))
}

// loadingBody is llama.cpp's answer while it loads the model.
func loadingBody() []byte { return llamaError(http.StatusServiceUnavailable, "Loading model") }

// listSlots is llama.cpp's GET /slots.
func (s *Server) listSlots(w http.ResponseWriter, _ *http.Request) {
	if s.slots == nil {
		writeJSON(w, http.StatusNotImplemented, llamaError(http.StatusNotImplemented,
			"This server does not support slots endpoint. Start it with `--slots`"))
		return
	}
	writeJSON(w, http.StatusOK, js(s.slots.states()))
}

// notFound answers a path the server does not serve, or a method it does
// not take there, as OpenAI answers one: a JSON 404 that an SDK reads as
// an error.
func notFound(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusNotFound, openAI{}.errorBody(http.StatusNotFound,
		fmt.Sprintf("Invalid URL (%s %s): outlast mock serves POST /v1/chat/completions, /v1/messages, /v1/responses and /completion", r.Method, r.URL.Path)))
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

// chunks returns the number of content chunks in a response.
func (s *Server) chunks() int {
	if s.Chunks == 0 {
		return defaultChunks
	}
	return s.Chunks
}

// model returns the handler for one API's model endpoint: it takes the
// script's step for the request, counts it, and answers as the step says.
func (s *Server) model(a api) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// Read the whole body first, so that a reset or a stall meets a
		// client that has finished sending, and so that the server
		// notices when the client hangs up.
		body, err := readBody(w, r)
		if err != nil {
			return
		}
		st, n := s.sched.take(time.Now())
		x := &exchange{s: s, w: w, r: r, api: a, st: st}
		outcome := st.label()
		if x.refusesPrefill(body) {
			outcome = "400"
			x.st = errorStep(http.StatusBadRequest, a, prefillRefusal)
		}
		if x.generates() {
			if err := x.parse(body); err != nil {
				outcome = "400"
				x.st = errorStep(http.StatusBadRequest, a, errorMessage(http.StatusBadRequest))
				s.logf("mockllm: %s %s: %v", r.Method, r.URL.Path, err)
			}
		}
		if x.generates() && s.Limits.on() {
			now := time.Now()
			ok, wait, reqs, toks := s.limits.take(apiKey(r), x.cost, now)
			setLimitHeaders(w.Header(), a, reqs, toks, now)
			switch {
			case !ok && wait < 0:
				// No wait makes room for it: it is refused as such, with
				// no Retry-After.
				outcome = "rate-limited"
				x.st = errorStep(http.StatusTooManyRequests, a, fmt.Sprintf("Request too large: it counts %d tokens, and the limit is %d tokens per %v.", x.cost, s.Limits.Tokens, s.Limits.window()))
			case !ok:
				outcome = "rate-limited"
				x.st = errorStep(http.StatusTooManyRequests, a, "Rate limit reached for requests or tokens per "+s.Limits.window().String()+".")
				x.st.retryAfter = int((wait + time.Second - 1) / time.Second)
				x.st.retryAfterMs = int((wait + time.Millisecond - 1) / time.Millisecond)
			}
		}
		if x.generates() {
			if !s.startGenerating() {
				outcome = "over-capacity"
				x.st = errorStep(http.StatusTooManyRequests, a, errorMessage(http.StatusTooManyRequests))
				if s.Limits.on() {
					s.limits.refund(apiKey(r), x.cost) // not served: its key's allowances are as they were
				}
			} else {
				defer s.generating.Add(-1)
			}
		}
		s.count(r.URL.Path, outcome)
		s.logf("mockllm: %s %s: step %d (%s): %s", r.Method, r.URL.Path, n+1, stepString(st), outcome)
		if s.ln.isRefusing() {
			// A refuse step began: this connection must not be reused.
			w.Header().Set("Connection", "close")
		}
		x.answer()
	}
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
}

func stepString(st step) string {
	return Script{steps: []step{st}}.String()
}

// startGenerating takes a place among the completions being generated,
// and reports false, taking none, if Capacity are already.
func (s *Server) startGenerating() bool {
	n := s.generating.Add(1)
	if s.Capacity > 0 && n > int64(s.Capacity) {
		s.generating.Add(-1)
		return false
	}
	for {
		p := s.peak.Load()
		if n <= p || s.peak.CompareAndSwap(p, n) {
			return true
		}
	}
}

// errorStep is a step of the server's own that answers status with the
// API's error object, with message, and no delay headers.
func errorStep(status int, a api, message string) step {
	return step{fault: faultStatus, status: status, hasBody: true, body: string(a.errorBody(status, message)), retryAfter: -1, retryAfterDate: -1, retryAfterMs: -1}
}
