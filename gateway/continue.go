package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/internal/sse"
	"github.com/outlast-llm/outlast/record"
)

// A Continuation says what the gateway does with a stream that breaks
// after its first byte has reached the caller: cut, reset, or silent past
// the idle timeout, before its last event.
type Continuation uint8

const (
	// ContinueOff ends the caller's stream with an error event: the
	// answer so far is the caller's, and the rest is lost.
	ContinueOff Continuation = iota
	// ContinuePrefill sends the request again with the answer so far as
	// its final assistant message, a prefill, and carries the caller's
	// stream on with only the new text: one stream, with the first
	// one's id and indices, one end, and no text twice or missing. The
	// continuation is the model's own, conditioned on the prefix, not
	// the bytes the broken stream would have sent, and it bills the
	// prompt again with the answer so far as input. For Anthropic's
	// Messages API, whose models continue a final assistant message
	// (those with extended thinking refuse one, and are not continued),
	// and OpenAI-compatible servers that do (vLLM, with the
	// continue_final_message it is sent; llama.cpp); OpenAI's own API
	// answers such a message instead of continuing it, so New refuses
	// it for api.openai.com and Azure OpenAI. A stream with a tool call,
	// reasoning, more than one choice or events outlast does not know
	// is not continued, and ends with the error event of ContinueOff.
	ContinuePrefill
)

// String returns "off" or "prefill".
func (c Continuation) String() string {
	switch c {
	case ContinueOff:
		return "off"
	case ContinuePrefill:
		return "prefill"
	}
	return fmt.Sprintf("Continuation(%d)", uint8(c))
}

// ParseContinuation reads "off" or "prefill".
func ParseContinuation(s string) (Continuation, error) {
	switch s {
	case "off":
		return ContinueOff, nil
	case "prefill":
		return ContinuePrefill, nil
	}
	return 0, fmt.Errorf("continuation %q: want off or prefill", s)
}

// checkContinuation refuses prefill for OpenAI's own API and Azure
// OpenAI, whose models answer a final assistant message rather than
// continue it.
func checkContinuation(c Continuation, u *url.URL) error {
	if c != ContinuePrefill {
		return nil
	}
	host := strings.ToLower(u.Hostname())
	if host == "api.openai.com" || strings.HasSuffix(host, ".openai.azure.com") {
		return fmt.Errorf("continuation prefill: %s does not continue a final assistant message, it answers it; prefill is for Anthropic and for OpenAI-compatible servers that continue one (vLLM, llama.cpp)", host)
	}
	return nil
}

// maxContinuations bounds the continuations of one request's stream: each
// bills the prompt again.
const maxContinuations = 5

// errEndedEarly is a stream that ended, cleanly, before its last event.
var errEndedEarly = errors.New("the stream ended before its last event")

// errUpstreamEnded is a stream that the upstream ended with an error of
// its own, mid-answer.
var errUpstreamEnded = errors.New("the upstream ended the stream with an error event")

// notContinued is the error that broke a stream, with why it was not
// continued, or how its continuation failed: never the text of a refusal,
// which is about the prefill, not the caller's request.
type notContinued struct {
	err error
	why string
}

func (e *notContinued) Error() string { return e.err.Error() + "; not continued: " + e.why }
func (e *notContinued) Unwrap() error { return e.err }

// copyContinuing forwards a stream through a splice, and continues it
// each time it breaks before its last event, while it may. It returns
// the context of the stream forwarded last and nil once the caller has
// the whole answer, or the error that broke the stream, with why it was
// not continued.
func (x *exchange) copyContinuing(ctx context.Context, resp *http.Response, cancel context.CancelCauseFunc) (context.Context, error) {
	s := &splice{}
	body := resp.Body
	for n := 0; ; n++ {
		err := x.out.copyEvents(body, s, x.cur.IdleTimeout, cancel, &x.rec.Committed, &x.rec.Bytes)
		body.Close()
		if errors.Is(err, errClientGone) || errors.Is(context.Cause(ctx), errShutdown) {
			return ctx, err
		}
		if (err == nil || s.finished) && !s.broke && (s.done || s.finished) {
			// Whole, though the last events may not have come: the
			// caller gets the end it would have had.
			x.out.endStream(s, &x.rec.Bytes)
			return ctx, nil
		}
		switch {
		case s.broke:
			err = errUpstreamEnded
		case err == nil:
			err = errEndedEarly
		}
		why := s.continuable()
		switch {
		case why != "":
		case n == maxContinuations:
			why = fmt.Sprintf("it was continued %d times already", maxContinuations)
		case x.pastBound():
			why = "its deadline less its reserve has come"
		}
		if why != "" {
			x.noteContinuation(record.ContinuationUnsupported, why, 0)
			return ctx, &notContinued{err, why}
		}
		cancel(nil)
		next, nctx, ncancel, cerr := x.continueStream(s)
		if cerr != nil {
			return ctx, &notContinued{err, cerr.Error()}
		}
		body, ctx, cancel = next.Body, nctx, ncancel
	}
}

// pastBound reports whether the request's deadline less its reserve has
// come: a continuation, like a retry, is not started past it.
func (x *exchange) pastBound() bool {
	bound := x.opts.policy.Bound(x.opts.deadline)
	return !bound.IsZero() && !time.Now().Before(bound)
}

// continueStream sends the continuation of s's stream where and when the
// policy sends a retry, the break being the stream's failure: its first
// attempt goes at once, its retries wait as retries after a first
// failure do, and it goes to the upstream the request is at, then, after
// two failed attempts there (the break was the first failure), to those
// of its fallbacks that continue streams. It returns the continuation's
// stream, committed, with its context and cancel, or why there is none,
// which it records.
func (x *exchange) continueStream(s *splice) (*http.Response, context.Context, context.CancelCauseFunc, error) {
	text := s.text.String()
	body, cut, why := continuationBody(x.callerBody, s.api, text)
	if why != "" {
		x.noteContinuation(record.ContinuationUnsupported, why, 0)
		return nil, nil, nil, errors.New(why)
	}
	prefill := int64(len(text) - len(cut))
	x.body = body
	x.fields, _ = scanBody(body)
	x.continued, x.prefill = true, prefill
	ctx, cancel := x.context()
	if p := x.opts.policy; p != nil {
		// The break was the stream's failure: the continuation's first
		// attempt goes at once, as the caller is mid-answer, and its
		// retries wait as retries after a first failure do.
		q := *p
		if len(q.Waits) > 1 {
			q.Waits = q.Waits[1:]
		}
		if q.MaxAttempts > 1 {
			q.MaxAttempts--
		}
		ctx = outlast.WithPolicy(ctx, &q)
	}
	x.hold(cancel)
	resp, err := x.continuationTripper().RoundTrip(x.outbound(ctx, x.cur))
	x.deadline.stop()
	switch {
	case err != nil:
		cancel(nil)
		x.noteContinuation(record.ContinuationFailed, outlast.Classify(err).String(), prefill)
		return nil, nil, nil, fmt.Errorf("its continuation failed (%s)", outlast.Classify(err))
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		discardBody(resp)
		cancel(nil)
		x.noteContinuation(record.ContinuationRefused, fmt.Sprintf("%d", resp.StatusCode), prefill)
		return nil, nil, nil, fmt.Errorf("upstream %s refused its continuation with %d", x.cur.Name, resp.StatusCode)
	case resp.StatusCode != http.StatusOK || !sse.IsStream(resp.Header):
		discardBody(resp)
		cancel(nil)
		x.noteContinuation(record.ContinuationFailed, fmt.Sprintf("%d", resp.StatusCode), prefill)
		return nil, nil, nil, fmt.Errorf("its continuation got %d, not a stream", resp.StatusCode)
	}
	x.noteContinuation(record.ContinuationOK, "", prefill)
	// The bytes forwarded so far were the attempt's that broke; done
	// counts them so if the continuation fails instead.
	x.rec.Attempts[x.forwarder].Bytes = x.rec.Bytes - x.spliced
	x.spliced = x.rec.Bytes
	x.forwarder, x.streaming = len(x.rec.Attempts)-1, x.cur // the caller reads its stream now
	s.begin(cut)
	return resp, ctx, cancel, nil
}

// continuationTripper sends a continuation: through the Transport of the
// upstream the request is at, then its fallbacks after it that continue
// streams too.
func (x *exchange) continuationTripper() http.RoundTripper {
	i := 0
	for i < len(x.up.chain) && x.up.chain[i] != x.cur {
		i++
	}
	var ups []*upstream
	for _, u := range x.up.chain[min(i, len(x.up.chain)):] {
		if u.Continuation == ContinuePrefill {
			ups = append(ups, u)
		}
	}
	if len(ups) <= 1 {
		return x.cur.stream
	}
	trs := make([]*outlast.Transport, len(ups))
	for j, u := range ups {
		trs[j] = u.stream
	}
	return &outlast.Fallback{
		Upstreams: trs,
		Prefer:    x.up.Prefer,
		// The break counts as the first of an upstream's failures.
		MaxAttempts: outlast.DefaultFallbackAttempts - 1,
		Rewrite: func(r *http.Request, j int) (*http.Request, error) {
			return x.outbound(r.Context(), ups[j]), nil
		},
		OnFallback: func(r *http.Request, from, to int, reason outlast.FallbackReason, err error) {
			x.onMove(ups[from], ups[to], reason, err)
		},
	}
}

// noteContinuation records a continuation of the stream the caller is
// reading, under the name of the upstream whose stream broke.
func (x *exchange) noteContinuation(outcome, reason string, prefill int64) {
	x.rec.Continuations = append(x.rec.Continuations, record.Continuation{
		Upstream: x.streaming.Name, After: x.rec.Bytes, Prefill: prefill, Outcome: outcome, Reason: reason,
	})
}

// discardBody drains a little of a response that is thrown away and
// closes it.
func discardBody(resp *http.Response) {
	if !sse.IsStream(resp.Header) { // a stream's end may never come
		io.CopyN(io.Discard, resp.Body, 64<<10)
	}
	resp.Body.Close()
}

// continuationBody returns the request that continues an answer whose
// text so far is text: orig, the caller's JSON body, with the answer as
// its final assistant message, and for OpenAI-compatible servers the
// fields that make them continue it (vLLM's continue_final_message, with
// add_generation_prompt off). A final assistant message the caller sent,
// a prefill of its own, is extended rather than followed by another. The
// prefill's trailing whitespace is cut, as Anthropic requires, and cut
// returns it: the caller has it, and the continuation's start drops it.
// With no text yet, orig goes as it is. why says why the request cannot
// be continued, if it cannot.
func continuationBody(orig []byte, api streamAPI, text string) (body []byte, cut, why string) {
	var req map[string]json.RawMessage
	if json.Unmarshal(orig, &req) != nil {
		return nil, "", "a request body that is not a JSON object"
	}
	var msgs []json.RawMessage
	if json.Unmarshal(req["messages"], &msgs) != nil || len(msgs) == 0 {
		return nil, "", "a request without messages"
	}
	switch api {
	case apiOpenAI:
		var n int
		if v, ok := req["n"]; ok && json.Unmarshal(v, &n) == nil && n > 1 {
			return nil, "", "more than one choice (n > 1)"
		}
	case apiAnthropic:
		var thinking struct {
			Type string `json:"type"`
		}
		if v, ok := req["thinking"]; ok && present(v) && (json.Unmarshal(v, &thinking) != nil || thinking.Type != "disabled") {
			return nil, "", "extended thinking, whose models refuse a prefill"
		}
	}
	if text == "" {
		return orig, "", ""
	}
	var last struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(msgs[len(msgs)-1], &last) != nil {
		return nil, "", "a final message outlast cannot read"
	}
	if last.Role == "assistant" {
		var prior string
		if json.Unmarshal(last.Content, &prior) != nil {
			return nil, "", "a final assistant message that is not text"
		}
		text = prior + text
		msgs = msgs[:len(msgs)-1]
	}
	kept := strings.TrimRightFunc(text, unicode.IsSpace)
	prefill, _ := json.Marshal(map[string]string{"role": "assistant", "content": kept})
	req["messages"], _ = json.Marshal(append(msgs, prefill))
	if api == apiOpenAI {
		req["continue_final_message"] = json.RawMessage("true")
		req["add_generation_prompt"] = json.RawMessage("false")
	}
	body, _ = json.Marshal(req)
	return body, text[len(kept):], ""
}
