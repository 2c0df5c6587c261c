package mockllm

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// exchange is one model request being answered as its step says.
type exchange struct {
	s    *Server
	w    http.ResponseWriter
	r    *http.Request
	api  api
	st   step
	rep  *reply // set by parse, for the steps that generate
	cost int    // set by parse: the request's tokens, as Limits count them

	wroteHeader bool // whether the status line and headers went
}

// generates reports whether the step answers with a completion, whole or
// cut short, rather than with an error or nothing.
func (x *exchange) generates() bool {
	switch x.st.fault {
	case faultOK, faultSlowHeaders, faultStall, faultStallAfter, faultResetAfter, faultCloseAfterHeaders,
		faultMalformedAfter, faultErrorAfter, faultNoDone:
		return true
	}
	return false
}

// parse reads the request body into the reply to send.
func (x *exchange) parse(body []byte) error {
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		return fmt.Errorf("the body is not a JSON object: %w", err)
	}
	task := int(x.s.seq.Add(1))
	rep := &reply{
		model: req.Model, created: time.Now().Unix(), stream: req.Stream,
		usage: req.StreamOptions.IncludeUsage, want: -1, task: task,
		prompt: countWords(&req), pieces: canonical(x.s.chunks()),
	}
	if rep.model == "" {
		rep.model = "mock"
	}
	switch x.api.(type) {
	case openAI:
		rep.id = "chatcmpl-mock-" + strconv.Itoa(task)
	case anthropic:
		rep.id = "msg_mock_" + strconv.Itoa(task)
	case responses:
		rep.id = "resp_mock_" + strconv.Itoa(task)
		rep.background, rep.store = req.Background, req.Store == nil || *req.Store
	}
	if text, ok := x.prefill(&req); ok && !x.st.ignorePrefill {
		// Anthropic rejects a prefill that ends in whitespace; cutting it
		// lets prefix and answer join as the canonical text.
		if rest, ok := continuation(rep.pieces, strings.TrimRightFunc(text, unicode.IsSpace)); ok {
			rep.pieces = rest
		}
	}
	if req.IDSlot != nil && *req.IDSlot >= 0 && x.s.slots != nil {
		if *req.IDSlot >= x.s.Slots {
			return fmt.Errorf("id_slot %d: the server has %d slots", *req.IDSlot, x.s.Slots)
		}
		rep.want = *req.IDSlot
	}
	x.rep = rep
	x.cost = tokenCost(&req, len(rep.pieces))
	return nil
}

// prefill returns the request's assistant prefill, and whether it has
// one; only the chat APIs have messages.
func (x *exchange) prefill(req *request) (string, bool) {
	switch x.api.(type) {
	case openAI, anthropic:
		return prefill(req)
	}
	return "", false
}

// refusesPrefill reports whether the request carries an assistant
// prefill that the step or the server refuses. A refuse step has no
// answer to give, so it never does.
func (x *exchange) refusesPrefill(body []byte) bool {
	if !x.st.refusePrefill && !x.s.RefusePrefill || x.st.fault == faultRefuse {
		return false
	}
	var req request
	if json.Unmarshal(body, &req) != nil {
		return false
	}
	_, ok := x.prefill(&req)
	return ok
}

// answer carries out the step.
func (x *exchange) answer() {
	if x.st.fault == faultRefuse {
		// The request came during a refuse step on a connection opened
		// before it: a restarted server would not have it.
		x.reset()
		return
	}
	if !x.wait(x.st.delay) {
		return
	}
	switch x.st.fault {
	case faultReset:
		x.reset()
	case faultStatus:
		x.status()
	case faultOverloaded:
		x.send(529, js(anthropicError(529, errorMessage(529))))
	case faultLoading:
		x.send(http.StatusServiceUnavailable, loadingBody())
	case faultOverloadedStream:
		x.overloadedStream()
	default:
		x.generate()
	}
}

// wait waits for d, and reports false if the client or the server gave
// up first.
func (x *exchange) wait(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-x.r.Context().Done():
	case <-x.s.done:
	}
	return false
}

// stall sends nothing more until the client or the server gives up.
func (x *exchange) stall() {
	x.flush()
	select {
	case <-x.r.Context().Done():
	case <-x.s.done:
	}
}

func (x *exchange) flush() { http.NewResponseController(x.w).Flush() }

// reset drops the connection with a TCP RST: SO_LINGER 0 makes close
// discard what is unsent and reset, where a plain close sends a FIN.
func (x *exchange) reset() {
	x.hangUp(true)
}

// hangUp takes the connection from the http.Server, after flushing what
// was written, and closes it, with a reset or not.
func (x *exchange) hangUp(reset bool) {
	c, _, err := http.NewResponseController(x.w).Hijack()
	if err != nil {
		x.s.logf("mockllm: %s %s: cannot hang up: %v", x.r.Method, x.r.URL.Path, err)
		return
	}
	if tc, ok := c.(*net.TCPConn); ok && reset {
		tc.SetLinger(0)
	}
	c.Close()
}

// headers sets the step's Retry-After and headers. A header the step
// names replaces the server's own; naming one twice sends both values.
func (x *exchange) headers() {
	h := x.w.Header()
	if x.st.retryAfter >= 0 {
		h.Set("Retry-After", strconv.Itoa(x.st.retryAfter))
	}
	if x.st.retryAfterDate >= 0 {
		// Rounded up to the second, since an HTTP-date has no fraction:
		// the client is told to wait at least that long.
		at := time.Now().Add(time.Duration(x.st.retryAfterDate) * time.Second)
		if frac := at.Sub(at.Truncate(time.Second)); frac > 0 {
			at = at.Add(time.Second - frac)
		}
		// RFC 9110 §10.2.3: Retry-After is delay-seconds or an HTTP-date.
		h.Set("Retry-After", at.UTC().Format(http.TimeFormat))
	}
	if x.st.retryAfterMs >= 0 {
		// Not a standard header: the OpenAI and Anthropic APIs send it.
		h.Set("Retry-After-Ms", strconv.Itoa(x.st.retryAfterMs))
	}
	set := map[string]bool{}
	for _, hd := range x.st.headers {
		name := http.CanonicalHeaderKey(hd.name)
		if !set[name] {
			h.Del(name)
			set[name] = true
		}
		h.Add(name, hd.value)
	}
}

// status sends a status step: its body, or for an error the API's error
// shape.
func (x *exchange) status() {
	body := []byte(x.st.body)
	if !x.st.hasBody && x.st.status >= 400 {
		body = x.api.errorBody(x.st.status, errorMessage(x.st.status))
	}
	x.send(x.st.status, body)
}

// send writes a whole response.
func (x *exchange) send(status int, body []byte) {
	if len(body) > 0 {
		ct := "text/plain; charset=utf-8"
		if json.Valid(body) {
			ct = "application/json"
		}
		x.w.Header().Set("Content-Type", ct)
	}
	x.headers()
	x.writeHeader(status)
	x.w.Write(body)
}

// writeHeader sends the status line and headers, once.
func (x *exchange) writeHeader(status int) {
	if !x.wroteHeader {
		x.wroteHeader = true
		x.w.WriteHeader(status)
	}
}

// overloadedStream is Anthropic's overload in the middle of things: a
// 200 event stream whose first event is the error.
func (x *exchange) overloadedStream() {
	x.eventStreamHeaders()
	x.headers()
	x.w.WriteHeader(http.StatusOK)
	x.event(event{name: "error", data: js(anthropicError(529, errorMessage(529)))})
}

func (x *exchange) eventStreamHeaders() {
	x.w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	x.w.Header().Set("Cache-Control", "no-cache")
}

// event writes one server-sent event and flushes it.
func (x *exchange) event(e event) error {
	b := make([]byte, 0, len(e.name)+len(e.data)+16)
	if e.name != "" {
		b = append(b, "event: "+e.name+"\n"...)
	}
	b = append(b, "data: "...)
	b = append(b, e.data...)
	b = append(b, "\n\n"...)
	if _, err := x.w.Write(b); err != nil {
		return err
	}
	return http.NewResponseController(x.w).Flush()
}

// generate sends a completion in a slot, whole or cut short by the step.
func (x *exchange) generate() {
	if x.s.slots != nil {
		id, err := x.s.slots.acquire(x.r.Context(), x.rep.want, x.rep.task)
		if err != nil {
			return
		}
		defer x.s.slots.release(id)
		x.rep.slot = id
	}
	if x.st.fault == faultSlowHeaders && !x.wait(x.st.d) {
		return
	}
	if x.rep.background {
		// Made whole at once, and kept: the stream, however the step
		// cuts it, can be had again from GET /v1/responses/{id}.
		x.s.store.put(x.rep, time.Now())
	}
	if x.rep.stream {
		x.stream()
	} else {
		x.whole()
	}
}

// cut returns how many content chunks go out before the step's fault,
// or -1 if it has none after the headers.
func (x *exchange) cut() int {
	switch x.st.fault {
	case faultStallAfter, faultResetAfter, faultMalformedAfter, faultErrorAfter:
		return x.st.n
	}
	return -1
}

// interrupt carries out the step's fault where it cuts in, and reports
// whether the response goes on after it: after a malformed event, or a
// stall that resumes. An error event ends the stream cleanly after it.
func (x *exchange) interrupt() bool {
	switch {
	case x.st.fault == faultMalformedAfter:
		return x.event(x.api.malformed(x.rep, x.st.n)) == nil
	case x.st.fault == faultErrorAfter:
		ev, _ := x.api.failure(x.rep, min(x.st.n, len(x.rep.pieces)))
		x.event(ev)
		return false
	case x.st.fault == faultResetAfter:
		x.reset()
		return false
	case x.st.resume > 0:
		x.flush()
		return x.wait(x.st.resume)
	}
	x.stall()
	return false
}

// firstToken sends the headers at once and waits for the step's
// first-token-delay, as a server whose model has not begun generating,
// and reports false if the client or the server gave up first.
func (x *exchange) firstToken() bool {
	if x.st.firstToken <= 0 {
		return true
	}
	x.writeHeader(http.StatusOK)
	x.flush()
	return x.wait(x.st.firstToken)
}

// stream sends an event stream: the events before the content, one
// event per content chunk, then the events after it.
func (x *exchange) stream() {
	x.eventStreamHeaders()
	x.headers()
	x.writeHeader(http.StatusOK)
	switch x.st.fault {
	case faultStall:
		x.stall()
		return
	case faultCloseAfterHeaders:
		x.hangUp(false)
		return
	}
	if !x.firstToken() {
		return
	}
	for _, e := range x.api.head(x.rep) {
		if x.event(e) != nil {
			return
		}
	}
	// The headers go now even with no event before the content
	// (llama.cpp), as a server that has begun generating sends them.
	x.flush()
	cut := x.cut()
	for i := range x.rep.pieces {
		if i == cut && !x.interrupt() {
			return
		}
		if !x.wait(x.s.ChunkDelay) || x.event(x.api.chunk(x.rep, i)) != nil {
			return
		}
	}
	if cut >= len(x.rep.pieces) && !x.interrupt() {
		return
	}
	tail := x.api.tail(x.rep)
	if x.st.fault == faultNoDone {
		// The stream's last event ends it: [DONE], message_stop, or
		// llama.cpp's result with "stop": true.
		tail = tail[:len(tail)-1]
	}
	for _, e := range tail {
		if x.event(e) != nil {
			return
		}
	}
}

// whole sends a JSON body once all its chunks are generated. When the
// step cuts it short, the body goes out in Chunks parts instead, so that
// the client gets part of it.
func (x *exchange) whole() {
	body := js(x.api.whole(x.rep))
	if x.rep.background {
		// A background response answers at once, queued; GET
		// /v1/responses/{id} has the rest.
		body = js(responses{}.object(x.rep, "queued"))
	}
	x.w.Header().Set("Content-Type", "application/json")
	x.headers()
	cut := x.cut()
	switch x.st.fault {
	case faultStall:
		x.writeHeader(http.StatusOK)
		x.stall()
		return
	case faultCloseAfterHeaders:
		x.writeHeader(http.StatusOK)
		x.hangUp(false)
		return
	case faultErrorAfter:
		// No stream to break: the error comes as the response it stands
		// for.
		_, status := x.api.failure(x.rep, 0)
		x.w.Header().Del("Content-Type")
		x.send(status, x.api.errorBody(status, errorMessage(status)))
		return
	case faultMalformedAfter:
		// No event to break: the body ends cleanly after its first N
		// parts, never whole, as a proxy that truncated it would send.
		body = body[:min(cut*partSize(body, len(x.rep.pieces)), len(body)-1)]
		cut = -1
	}
	if cut < 0 {
		x.w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	}
	if !x.firstToken() {
		return
	}
	if cut >= 0 {
		x.writeHeader(http.StatusOK)
		x.parts(body, cut)
		return
	}
	if !x.wait(time.Duration(len(x.rep.pieces)) * x.s.ChunkDelay) {
		return
	}
	x.writeHeader(http.StatusOK)
	x.w.Write(body)
}

// partSize is the size of one of a body's parts when it is cut into n.
func partSize(body []byte, n int) int {
	n = max(n, 1)
	return (len(body) + n - 1) / n
}

// parts sends the body in parts, with the step's fault after the first
// n.
func (x *exchange) parts(body []byte, n int) {
	size := partSize(body, len(x.rep.pieces))
	for i := 0; i*size < len(body); i++ {
		if i == n && !x.interrupt() {
			return
		}
		if !x.wait(x.s.ChunkDelay) {
			return
		}
		if _, err := x.w.Write(body[i*size : min(len(body), (i+1)*size)]); err != nil {
			return
		}
		x.flush()
	}
	if n*size >= len(body) {
		x.interrupt()
	}
}
