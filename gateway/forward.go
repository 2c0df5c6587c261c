package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outlast-llm/outlast/internal/sse"
)

// errIdle ends an upstream response that fell silent for IdleTimeout.
var errIdle = errors.New("outlast: the upstream response fell silent for longer than the idle timeout")

// bufPool holds the buffers that response bodies are copied through.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// forward sends the committed response to the caller, chunk by chunk,
// flushing each chunk of a stream as it arrives.
func (x *exchange) forward(resp *http.Response, cancel context.CancelCauseFunc) {
	defer resp.Body.Close()
	x.rec.Status = resp.StatusCode
	x.mu.Lock()
	progressed := x.progressed
	if !progressed {
		h := x.w.Header()
		copyHeader(h, resp.Header)
		x.ownHeaders(h)
		x.w.WriteHeader(resp.StatusCode)
		x.committed = true
	}
	x.mu.Unlock()
	stream := x.rec.Stream || sse.IsStream(resp.Header)
	if progressed && (resp.StatusCode >= 300 || !sse.IsStream(resp.Header)) {
		// The caller was promised an event stream; the upstream's answer
		// is something else, and comes as an error event.
		x.rec.Status = http.StatusOK
		x.errorEvent("upstream_error", fmt.Sprintf("outlast: upstream %s answered %s", x.up.Name, resp.Status), readSnippet(resp.Body))
		return
	}
	err := x.copyBody(resp.Body, stream, cancel)
	switch {
	case err == nil:
	case errors.Is(err, errClientGone):
		x.rec.Error = "client-closed"
	case stream:
		x.rec.Error = "upstream-broke"
		x.errorEvent("upstream_error", fmt.Sprintf("outlast: upstream %s broke off the stream after %d bytes: %v", x.up.Name, x.rec.Bytes, err), nil)
	default:
		// A body cut short must not look complete: abort the connection
		// so that the caller sees the failure (net/http's convention).
		x.rec.Error = "upstream-broke"
		panic(http.ErrAbortHandler)
	}
}

var errClientGone = errors.New("outlast: the caller closed the connection")

// copyBody copies body to the caller. With an idle timeout, a silence
// longer than it cancels the upstream request.
func (x *exchange) copyBody(body io.Reader, flush bool, cancel context.CancelCauseFunc) error {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	var idle *time.Timer
	var silent atomic.Bool // the idle timer fired
	if d := x.up.IdleTimeout; d > 0 {
		idle = time.AfterFunc(d, func() { silent.Store(true); cancel(errIdle) })
		defer idle.Stop()
	}
	rc := http.NewResponseController(x.w)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			// The idle timeout is the upstream's silence: the time spent
			// writing to a slow caller does not count.
			if idle != nil {
				idle.Stop()
			}
			x.rec.Committed = true
			if _, werr := x.w.Write(buf[:n]); werr != nil {
				return errClientGone
			}
			x.rec.Bytes += int64(n)
			if flush && rc.Flush() != nil {
				return errClientGone
			}
			if idle != nil && !silent.Load() {
				idle.Reset(x.up.IdleTimeout)
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if silent.Load() {
				return errIdle
			}
			return err
		}
	}
}

// ownHeaders adds the gateway's response headers.
func (x *exchange) ownHeaders(h http.Header) {
	h.Set(HeaderRequestID, x.rec.ID)
	h.Set(HeaderAttempts, strconv.Itoa(len(x.rec.Attempts)))
}

// apiError is the OpenAI error shape, with Anthropic's top-level type so
// that both SDKs read it as an error.
type apiError struct {
	Type  string `json:"type"`
	Error struct {
		Type     string `json:"type"`
		Message  string `json:"message"`
		Upstream string `json:"upstream,omitempty"`
	} `json:"error"`
}

func errorBody(typ, msg string, upstream []byte) []byte {
	var e apiError
	e.Type = "error"
	e.Error.Type, e.Error.Message = typ, msg
	if len(upstream) > 0 {
		e.Error.Upstream = string(upstream)
	}
	b, _ := json.Marshal(e)
	return b
}

// fail answers with an error the gateway made: JSON with Outlast-Error, or,
// once progress comments have gone out, an error event.
func (x *exchange) fail(status int, kind, msg string, extra http.Header) {
	x.rec.Error = kind
	x.mu.Lock()
	progressed := x.progressed
	x.mu.Unlock()
	if progressed {
		x.rec.Status = http.StatusOK
		x.errorEvent("outlast_"+kindType(kind), msg, nil)
		return
	}
	x.rec.Status = status
	h := x.w.Header()
	for k, v := range extra {
		h[k] = v
	}
	x.ownHeaders(h)
	h.Set(HeaderError, kind)
	writeError(x.w, status, kind, "outlast_"+kindType(kind), msg)
	x.committed = true
}

func kindType(kind string) string {
	b := []byte(kind)
	for i, c := range b {
		if c == '-' {
			b[i] = '_'
		}
	}
	return string(b)
}

// writeError writes a JSON error response.
func writeError(w http.ResponseWriter, status int, kind, typ, msg string) {
	h := w.Header()
	h.Set(HeaderError, kind)
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	w.WriteHeader(status)
	w.Write(append(errorBody(typ, msg, nil), '\n'))
}

// errorEvent ends an event stream with an error event.
func (x *exchange) errorEvent(typ, msg string, upstream []byte) {
	x.mu.Lock()
	defer x.mu.Unlock()
	fmt.Fprintf(x.w, "event: error\ndata: %s\n\n", errorBody(typ, msg, upstream))
	http.NewResponseController(x.w).Flush()
}

// readSnippet reads up to 4 KiB of a body for an error message.
func readSnippet(r io.Reader) []byte {
	b, _ := io.ReadAll(io.LimitReader(r, 4<<10))
	return b
}

// startProgress starts the progress comments of a streaming request that
// asked for them, and returns the func that stops them.
func (x *exchange) startProgress() (stop func()) {
	if !x.opts.progress || !x.rec.Stream {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(x.g.cfg.ProgressInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				x.comment("waiting")
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// comment sends an SSE comment line to a caller that asked for progress.
// The first one commits the response as a 200 event stream.
func (x *exchange) comment(format string, args ...any) {
	if !x.opts.progress || !x.rec.Stream {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.committed && !x.progressed {
		return
	}
	if !x.progressed {
		h := x.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set(HeaderRequestID, x.rec.ID)
		x.w.WriteHeader(http.StatusOK)
		x.progressed, x.committed = true, true
	}
	fmt.Fprintf(x.w, ": outlast "+format+"\n\n", args...)
	http.NewResponseController(x.w).Flush()
}
