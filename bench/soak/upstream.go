package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
)

// upstream is the fake provider: OpenAI's chat completions, failing as
// pick says. It counts the attempts in flight as it sees them, records
// each arrival with its place in the order the gate granted them, and, for
// the probes, can hold arrivals and free them one at a time.
//
// mockllm's scripts run in order and end on a step that repeats, so they
// cannot fail a fifth of the attempts for a minute; nor does mockllm say
// how many requests it holds at once. Hence this fake.
type upstream struct {
	slots  int // the gateway's bound, which decides how exact an arrival's rank is
	seed   uint64
	rate   float64
	work   time.Duration
	pieces []string

	wake chan struct{} // cap 1: an attempt arrived; read by the probe alone
	done chan struct{} // closed by stop: every held or working handler returns

	mu       sync.Mutex // guards the fields below
	inFlight int
	peak     int
	arrivals []arrival
	seen     map[attemptKey]bool
	bad      []string        // what should not have arrived: a duplicate attempt, a changed request
	paused   bool            // arrivals are held
	stepping bool            // held arrivals are freed one at a time: each arrival is the next grant
	held     []chan struct{} // held arrivals, oldest first; closing one frees it
	rank     int64
	stopped  bool
}

// attemptKey names one attempt: its request's tag and its number.
type attemptKey struct {
	tag string
	n   int
}

// An arrival is one attempt as the upstream saw it. Its rank orders the
// grants: an attempt of a lower rank was granted its slot before one of a
// higher rank. Equal ranks say nothing.
type arrival struct {
	attemptKey
	rank int64
}

func newUpstream(c config, slots int) *upstream {
	return &upstream{
		slots: slots, seed: c.Seed, rate: c.FaultRate, work: c.Work, pieces: pieces(c.Chunks),
		wake: make(chan struct{}, 1), done: make(chan struct{}),
		seen: map[attemptKey]bool{},
	}
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var req chatRequest
	n, nerr := strconv.Atoi(r.Header.Get(outlast.AttemptHeader))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil || r.URL.Path != chatPath || req.User == "" || nerr != nil || n < 1 {
		u.refuse(fmt.Sprintf("%s %s with %s %q: not a request the callers send (%v)", r.Method, r.URL.Path, outlast.AttemptHeader, r.Header.Get(outlast.AttemptHeader), err))
		http.Error(w, `{"error":{"message":"soak: unexpected request"}}`, http.StatusBadRequest)
		return
	}
	switch {
	case !bytes.Equal(body, requestBody(req.User, req.Stream)):
		u.refuse(fmt.Sprintf("attempt %d of %s: the body is not the one its caller sent", n, req.User))
	case r.Header.Get(gateway.HeaderRun) != "":
		u.refuse(fmt.Sprintf("attempt %d of %s: the gateway forwarded its %s header", n, req.User, gateway.HeaderRun))
	}
	if hold := u.arrive(attemptKey{req.User, n}); hold != nil {
		select {
		case <-hold:
		case <-u.done:
		case <-r.Context().Done():
		}
	}
	if u.work > 0 {
		t := time.NewTimer(u.work)
		select {
		case <-t.C:
		case <-u.done:
		case <-r.Context().Done():
		}
		t.Stop()
	}
	u.answer(w, pick(u.seed, u.rate, req.User, n, req.Stream), completionID(req.User, n), req.Stream)
}

// arrive counts attempt k in flight and records it. While the upstream is
// paused it returns a channel that is closed when k may go on.
func (u *upstream) arrive(k attemptKey) (hold chan struct{}) {
	defer signal(u.wake)
	u.mu.Lock()
	defer u.mu.Unlock()
	u.inFlight++
	u.peak = max(u.peak, u.inFlight)
	if u.seen[k] {
		u.bad = append(u.bad, fmt.Sprintf("attempt %d of %s arrived twice", k.n, k.tag))
	}
	u.seen[k] = true
	// With one slot the gate lets one attempt through at a time, and the
	// next is granted only after this one has answered: arrivals come in
	// the order of the grants. So they do while stepping, when each freed
	// slot is the only one free. Otherwise attempts granted in some order
	// may arrive in another, and all share a rank.
	exact := u.slots == 1 || u.stepping
	if exact {
		u.rank++
	}
	u.arrivals = append(u.arrivals, arrival{k, u.rank})
	if exact {
		u.rank++
	}
	if !u.paused || u.stopped {
		return nil
	}
	hold = make(chan struct{})
	u.held = append(u.held, hold)
	return hold
}

// leave ends an attempt in flight. It is called just before the write
// that lets the gateway finish the attempt and free its slot, so that the
// next attempt cannot arrive while this one still counts.
func (u *upstream) leave() {
	u.mu.Lock()
	u.inFlight--
	u.mu.Unlock()
}

func (u *upstream) refuse(why string) {
	u.mu.Lock()
	u.bad = append(u.bad, why)
	u.mu.Unlock()
}

// answer writes the answer that f says, calling leave once, just before
// the write that the gateway finishes the attempt on.
func (u *upstream) answer(w http.ResponseWriter, f fault, id string, stream bool) {
	left := false
	leave := func() {
		if !left {
			left = true
			u.leave()
		}
	}
	defer leave() // for an answer cut short by a failed write
	h := w.Header()
	switch f {
	case faultNone:
		if stream {
			u.stream(w, id, leave)
			return
		}
		writeJSON(w, http.StatusOK, completionBody(id), leave)
	case fault503:
		writeJSON(w, http.StatusServiceUnavailable, errorBody(503), leave)
	case fault429:
		// RFC 9110 §10.2.3: delay-seconds; the gateway waits at least
		// this long (its retry_after: at-least).
		h.Set("Retry-After", "1")
		writeJSON(w, http.StatusTooManyRequests, errorBody(429), leave)
	case fault529:
		writeJSON(w, 529, errorBody(529), leave)
	case faultReset:
		hangUp(w, leave, true)
	case faultClose:
		if stream {
			h.Set("Content-Type", "text/event-stream")
		} else {
			h.Set("Content-Type", "application/json")
			h.Set("Content-Length", strconv.Itoa(len(completionBody(id))))
		}
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush() // Hijack would leave the headers unsent
		hangUp(w, leave, false)
	case faultErrorEvent:
		h.Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		leave()
		io.WriteString(w, overloadedEvent)
		http.NewResponseController(w).Flush()
	}
}

// stream writes the completion as OpenAI's events, each flushed.
func (u *upstream) stream(w http.ResponseWriter, id string, leave func()) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for i, p := range u.pieces {
		finish := ""
		if i == len(u.pieces)-1 {
			finish = "stop"
		}
		if _, err := w.Write(chunkEvent(id, p, finish)); err != nil || rc.Flush() != nil {
			return
		}
	}
	// The stream ends with its chunked encoding's last chunk, written
	// once the handler returns; the gateway frees the slot at that end.
	leave()
	io.WriteString(w, doneEvent)
}

func writeJSON(w http.ResponseWriter, status int, body []byte, leave func()) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	leave()
	w.Write(body)
}

// hangUp ends the connection, after what has been written: with a TCP
// reset if reset is set, else with an orderly close.
func hangUp(w http.ResponseWriter, leave func(), reset bool) {
	c, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	leave()
	if tc, ok := c.(*net.TCPConn); ok && reset {
		tc.SetLinger(0)
	}
	c.Close()
}

// pause holds every attempt that arrives from now on.
func (u *upstream) pause() {
	u.mu.Lock()
	u.paused = true
	u.mu.Unlock()
}

// holding returns how many attempts are held, and how many have arrived.
func (u *upstream) holding() (held, arrived int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.held), len(u.arrivals)
}

// step frees the oldest held attempt. From the first step on, arrivals
// are ranked one by one: each is the grant of the slot a step freed.
func (u *upstream) step() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.stepping = true
	if len(u.held) > 0 {
		close(u.held[0])
		u.held = u.held[1:]
	}
}

// resume frees every held attempt and holds no more.
func (u *upstream) resume() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.paused, u.stepping = false, false
	for _, c := range u.held {
		close(c)
	}
	u.held = nil
}

// stop ends every held or working handler, for the end of a phase.
func (u *upstream) stop() {
	u.resume()
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.stopped {
		u.stopped = true
		close(u.done)
	}
}

// seenState is what the upstream saw over a phase.
type seenState struct {
	peak     int
	arrivals []arrival
	bad      []string
}

func (u *upstream) seenState() seenState {
	u.mu.Lock()
	defer u.mu.Unlock()
	return seenState{peak: u.peak, arrivals: u.arrivals, bad: u.bad}
}

// signal wakes whoever waits on c, if nobody has already.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
