package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/internal/apierr"
)

// An outcome is one request as its caller saw it.
type outcome struct {
	tag      string
	id       string // Outlast-Request-Id
	status   int
	kind     string // what the answer was (the kinds below), or "" if it was not one
	attempts int    // Outlast-Attempts, or -1 without it
	took     time.Duration
	clean    bool   // no probe held the upstream while it ran: its time is the gateway's own
	bad      string // why it was not a well-formed, complete answer; "" if it was
}

// The kinds of answer a caller may get.
const (
	kindOK          = "ok"               // the completion of its last attempt, whole
	kindBusy        = "busy"             // the gateway's 503 busy
	kindUnreachable = "unreachable"      // the gateway's 502, after the last attempt broke
	kindUpstream    = "upstream-failure" // the upstream's failure, after the last attempt
)

// caller sends one request at a time, as caller number id, until stop is
// closed, and returns what each got.
func (ph *phase) caller(id int, stop <-chan struct{}) []outcome {
	var out []outcome
	for i := 0; ; i++ {
		select {
		case <-stop:
			return out
		default:
		}
		o, wait := ph.call(fmt.Sprintf("s%d-c%d-%d", ph.slots, id, i))
		out = append(out, o)
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-stop:
				t.Stop()
				return out
			}
		}
	}
}

// call sends the request tagged tag, judges its answer, and returns it
// with how long to wait before the next request: Retry-After, up to
// BusyWait, after busy.
func (ph *phase) call(tag string) (outcome, time.Duration) {
	stream := streams(ph.cfg.Seed, ph.cfg.StreamShare, tag)
	o := outcome{tag: tag, attempts: -1}
	req, err := http.NewRequest(http.MethodPost, ph.front.url+chatPath, bytes.NewReader(requestBody(tag, stream)))
	if err != nil {
		o.bad = err.Error()
		return o, 0
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(gateway.HeaderRun, tag)
	window, pauses := ph.probes.window.Load(), ph.pauses.Load()
	ph.led.sent(tag, ph.clock.Add(1))
	start := time.Now()
	resp, err := ph.client.Do(req)
	if err != nil {
		o.bad = "no answer: " + err.Error()
		return o, 0
	}
	o.status, o.id = resp.StatusCode, resp.Header.Get(gateway.HeaderRequestID)
	o.kind, o.attempts, o.bad = judge(resp, tag, stream, ph.maxAttempts, ph.up.pieces)
	resp.Body.Close()
	o.took = time.Since(start)
	o.clean = pauses%2 == 0 && ph.pauses.Load() == pauses
	if o.kind != kindBusy {
		return o, 0
	}
	ph.probes.judgeBusy(window, tag, ph.queued, ph.cfg.Queue)
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	return o, min(time.Duration(ra)*time.Second, ph.cfg.BusyWait)
}

// judge reads resp to its end and says what kind of answer it is to the
// request tagged tag, with its Outlast-Attempts, or why it is not a
// well-formed, complete answer. The gateway forwards the last attempt's
// response unchanged, so a completion must be, byte for byte, the one
// that attempt was sent; a failure of the upstream's comes through only
// after the last attempt the policy allows.
func judge(resp *http.Response, tag string, stream bool, maxAttempts int, pieces []string) (kind string, attempts int, bad string) {
	attempts = -1
	if v := resp.Header.Get(gateway.HeaderAttempts); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return "", -1, fmt.Sprintf("%s %q is not a count", gateway.HeaderAttempts, v)
		}
		attempts = n
	}
	body, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return "", attempts, fmt.Sprintf("%d, body cut after %d bytes: %v", resp.StatusCode, len(body), err)
	case attempts < 0:
		return "", attempts, fmt.Sprintf("%d without %s", resp.StatusCode, gateway.HeaderAttempts)
	case resp.Header.Get(gateway.HeaderRequestID) == "":
		return "", attempts, fmt.Sprintf("%d without %s", resp.StatusCode, gateway.HeaderRequestID)
	}
	if e := resp.Header.Get(gateway.HeaderError); e != "" {
		kind, bad = judgeGatewayError(resp, e, body, attempts, maxAttempts)
		return kind, attempts, bad
	}
	want, kind := expected(resp.StatusCode, tag, stream, attempts, pieces)
	if resp.StatusCode == http.StatusOK && stream && string(body) == overloadedEvent {
		// The stream's opening error event, forwarded after the last
		// attempt.
		want, kind = body, kindUpstream
	}
	if want == nil {
		return "", attempts, fmt.Sprintf("status %d after %d attempts, with a body of %d bytes", resp.StatusCode, attempts, len(body))
	}
	if kind == kindUpstream && attempts != maxAttempts {
		return "", attempts, fmt.Sprintf("the upstream's %d after %d attempts; the policy allows %d", resp.StatusCode, attempts, maxAttempts)
	}
	if !bytes.Equal(body, want) {
		i := 0
		for i < len(body) && i < len(want) && body[i] == want[i] {
			i++
		}
		return "", attempts, fmt.Sprintf("status %d: the body differs from attempt %d's at byte %d of %d (got %q)", resp.StatusCode, attempts, i, len(want), snippet(body, i))
	}
	return kind, attempts, ""
}

// expected returns the body that a status without Outlast-Error must
// carry, and the kind of answer it is, or nil for a status the upstream
// never sends.
func expected(status int, tag string, stream bool, attempts int, pieces []string) ([]byte, string) {
	switch status {
	case http.StatusOK:
		id := completionID(tag, attempts)
		if stream {
			return streamBody(id, pieces), kindOK
		}
		return completionBody(id), kindOK
	case http.StatusServiceUnavailable, http.StatusTooManyRequests, 529:
		return errorBody(status), kindUpstream
	}
	return nil, ""
}

// streamBody is the whole event stream of the completion id.
func streamBody(id string, pieces []string) []byte {
	var b bytes.Buffer
	for i, p := range pieces {
		finish := ""
		if i == len(pieces)-1 {
			finish = "stop"
		}
		b.Write(chunkEvent(id, p, finish))
	}
	b.WriteString(doneEvent)
	return b.Bytes()
}

// judgeGatewayError judges an error the gateway made, of kind e: busy, or
// unreachable after the last attempt broke, each in the gateway's one
// error shape.
func judgeGatewayError(resp *http.Response, e string, body []byte, attempts, maxAttempts int) (kind, bad string) {
	var shape struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &shape); err != nil || shape.Type != "error" || shape.Error.Type != apierr.Type(e) || shape.Error.Message == "" {
		return "", fmt.Sprintf("%d %s: the body is not the gateway's error shape: %q", resp.StatusCode, e, snippet(body, 0))
	}
	switch {
	case e == apierr.Busy && resp.StatusCode == http.StatusServiceUnavailable:
		if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 {
			return "", fmt.Sprintf("busy with Retry-After %q: want whole seconds, 1 or more", resp.Header.Get("Retry-After"))
		}
		return kindBusy, ""
	case e == apierr.Unreachable && resp.StatusCode == http.StatusBadGateway:
		if attempts != maxAttempts {
			return "", fmt.Sprintf("unreachable after %d attempts; the policy allows %d", attempts, maxAttempts)
		}
		return kindUnreachable, ""
	}
	return "", fmt.Sprintf("%d %s: %s", resp.StatusCode, e, shape.Error.Message)
}

// snippet returns up to 80 bytes of b from i, for a message.
func snippet(b []byte, i int) string {
	return string(b[i:min(len(b), i+80)])
}
