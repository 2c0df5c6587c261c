package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	// A continuation whose text begins with the answer's opening (a
	// server that answered the prefill from the start rather than
	// continuing it) is refused before any of it reaches the caller, and
	// a model that refused a prefill is sent none for an hour.
	ContinuePrefill
	// ContinueResume resumes a stream of OpenAI's Responses API instead
	// of generating it again: the gateway creates such a response with
	// "background": true, and when its stream breaks it streams the rest
	// from GET /v1/responses/{id}?stream=true&starting_after=N, N the
	// last event forwarded, so that the caller gets the very bytes the
	// broken stream would have sent, each event once, with no second
	// generation and no prefill. A background response is stored by the
	// provider (about 10 minutes at OpenAI), so it is not for accounts
	// that must keep no data; a request that asks "store": false or
	// "background": false is sent as it is, and not resumed. A caller
	// that leaves, or a stream that cannot be resumed, cancels the
	// response (POST /v1/responses/{id}/cancel). Other streams of such an
	// upstream end with the error event of ContinueOff.
	ContinueResume
	// ContinueAuto is ContinuePrefill where the upstream continues a
	// prefill, and ContinueOff for OpenAI's own API and Azure OpenAI,
	// whose models answer one instead; it never resumes, which stores
	// responses at the provider. It is outlast serve's default.
	ContinueAuto
)

// String returns "off", "prefill", "resume" or "auto".
func (c Continuation) String() string {
	switch c {
	case ContinueOff:
		return "off"
	case ContinuePrefill:
		return "prefill"
	case ContinueResume:
		return "resume"
	case ContinueAuto:
		return "auto"
	}
	return fmt.Sprintf("Continuation(%d)", uint8(c))
}

// ParseContinuation reads "off", "prefill", "resume" or "auto".
func ParseContinuation(s string) (Continuation, error) {
	switch s {
	case "off":
		return ContinueOff, nil
	case "prefill":
		return ContinuePrefill, nil
	case "resume":
		return ContinueResume, nil
	case "auto":
		return ContinueAuto, nil
	}
	return 0, fmt.Errorf("continuation %q: want off, prefill, resume or auto", s)
}

// answersPrefill reports whether u is OpenAI's own API or Azure OpenAI,
// whose models answer a final assistant message rather than continue it.
func answersPrefill(u *url.URL) bool {
	host := strings.ToLower(u.Hostname())
	return host == "api.openai.com" || strings.HasSuffix(host, ".openai.azure.com")
}

// checkContinuation refuses prefill for OpenAI's own API and Azure
// OpenAI, and returns the continuation in force at u: ContinueAuto made
// prefill or off.
func checkContinuation(c Continuation, u *url.URL) (Continuation, error) {
	switch {
	case c == ContinuePrefill && answersPrefill(u):
		return c, fmt.Errorf("continuation prefill: %s does not continue a final assistant message, it answers it; prefill is for Anthropic and for OpenAI-compatible servers that continue one (vLLM, llama.cpp)", strings.ToLower(u.Hostname()))
	case c == ContinueAuto && answersPrefill(u):
		return ContinueOff, nil
	case c == ContinueAuto:
		return ContinuePrefill, nil
	}
	return c, nil
}

// maxContinuations bounds the continuations of one request's stream: a
// prefill bills the prompt again, and a stream that breaks this often is
// not worth carrying on.
const maxContinuations = 5

// prefillMemory is how long an upstream's model that refused a prefill
// (a 400 or 422 to it) is sent none, and one whose replay differed from
// the answer is not replayed: newer Claude models refuse any prefill, and
// a model that samples answers a replay with other text; each would cost
// a request before the caller gets its error.
const prefillMemory = time.Hour

// notContinued is the error that broke a stream, with why it was not
// carried on, or how its continuation failed: never the text of a
// refusal, which is about the prefill, not the caller's request.
type notContinued struct {
	err error
	why string
}

func (e *notContinued) Error() string { return e.err.Error() + "; not continued: " + e.why }
func (e *notContinued) Unwrap() error { return e.err }

// again sends a request that carries the committed stream on, through
// rt, as a retry of the stream that broke: its first attempt goes at
// once, as the caller is mid-answer, and its retries wait as retries
// after a first failure do, within the request's deadline less its
// reserve. build makes the request under the attempts' context. The
// attempts are recorded as continuing the stream, with a prefill of
// prefill bytes. It returns the response, committed, with its context
// and the cancel that ends it. It is the relay's one way back to the
// exchange's attempts.
func (x *exchange) again(rt http.RoundTripper, build func(context.Context) *http.Request, prefill int64) (*continued, error) {
	x.continued, x.prefill = true, prefill
	ctx, cancel := x.context()
	if p := x.opts.policy; p != nil {
		q := *p
		if len(q.Waits) > 1 {
			q.Waits = q.Waits[1:]
		}
		if q.MaxAttempts > 0 {
			q.MaxAttempts = max(x.attemptsLeft(), 1) // the stream's own count as one request's (see bounded)
		}
		ctx = outlast.WithPolicy(ctx, &q)
	}
	x.hold(cancel)
	stop := x.keepHearing(cancel)
	resp, err := rt.RoundTrip(build(ctx))
	gone := stop()
	x.deadline.stop()
	switch {
	case gone:
		if err == nil {
			discardBody(resp)
		}
		cancel(errClientGone)
		return nil, errClientGone
	case err != nil:
		cancel(nil)
		return nil, err
	}
	return &continued{resp: resp, ctx: ctx, cancel: cancel}, nil
}

// keepHearing keeps the caller of a stream being carried on hearing from
// the gateway while the continuation's attempts and waits go on, which
// may be minutes at an upstream that is down: a comment every
// ProgressInterval, so that no proxy's or SDK's read timeout ends the
// stream first. A caller that takes none of a comment for the idle
// timeout is gone, and cancel ends the attempts. stop ends the comments,
// and reports whether the caller was gone.
func (x *exchange) keepHearing(cancel context.CancelCauseFunc) (stop func() (gone bool)) {
	idle := x.cur.IdleTimeout
	var left atomic.Bool
	stopTicking := ticking(x.g.cfg.ProgressInterval, func() bool {
		if x.out.keepAlive("continuing", idle) {
			return true
		}
		left.Store(true)
		cancel(errClientGone)
		return false
	})
	return func() bool {
		stopTicking()
		return left.Load()
	}
}

// judged is a continuation's response judged: the stream to carry on
// with, or, noted in the record, why there is none.
func (r *relay) judged(next *continued, err error, outcome string, prefill int64, broke error) (*continued, error) {
	x := r.x
	switch {
	case errors.Is(err, errClientGone):
		r.note(record.ContinuationFailed, outlast.ClassCanceled.String(), prefill)
		return nil, err // nobody to carry it on for
	case err != nil:
		r.note(record.ContinuationFailed, outlast.Classify(err).String(), prefill)
		return nil, &notContinued{broke, fmt.Sprintf("its continuation failed (%s)", outlast.Classify(err))}
	case next.resp.StatusCode >= 400 && next.resp.StatusCode < 500:
		discardBody(next.resp)
		next.cancel(nil)
		r.note(record.ContinuationRefused, strconv.Itoa(next.resp.StatusCode), prefill)
		return nil, &notContinued{broke, fmt.Sprintf("upstream %s refused its continuation with %d", x.cur.Name, next.resp.StatusCode)}
	case next.resp.StatusCode != http.StatusOK || !sse.IsStream(next.resp.Header):
		discardBody(next.resp)
		next.cancel(nil)
		r.note(record.ContinuationFailed, strconv.Itoa(next.resp.StatusCode), prefill)
		return nil, &notContinued{broke, fmt.Sprintf("its continuation got %d, not a stream", next.resp.StatusCode)}
	}
	r.note(outcome, "", prefill)
	r.splice()
	return next, nil
}

// carryOn continues s's stream with a prefill: where and when the policy
// sends a retry, the break being the stream's failure, to the upstream
// the request is at, then, after two failed attempts there (the break was
// the first failure), to those of its fallbacks that continue streams. A
// model that refuses a prefill (a 400 or 422 to it, now or within the
// last hour) is sent the request again as it was, a replay, whose answer
// carries the caller's on only if it starts with the whole answer so far.
func (s *splice) carryOn(r *relay, broke error) (*continued, error) {
	x := r.x
	text := s.text.String()
	why := s.continuable()
	if why == "" {
		why = r.bounded()
	}
	var body []byte
	var cut string
	if why == "" {
		body, cut, why = continuationBody(x.callerBody, s.api, text)
	}
	if why != "" {
		r.note(record.ContinuationUnsupported, why, 0)
		return nil, &notContinued{broke, why}
	}
	model := x.modelKey()
	if text != "" && x.cur.prefills.within(model, time.Now()) {
		return s.replay(r, broke, fmt.Sprintf("model %q refused a prefill within the last %v", x.rec.Model, prefillMemory))
	}
	r.n++
	prefill := int64(len(text) - len(cut))
	x.body = body
	x.fields, _ = scanBody(body)
	next, err := x.again(x.continuationTripper(), func(ctx context.Context) *http.Request { return x.outbound(ctx, x.cur) }, prefill)
	refused := err == nil && text != "" && (next.resp.StatusCode == http.StatusBadRequest || next.resp.StatusCode == http.StatusUnprocessableEntity)
	if refused {
		// The model refused the prefill: none goes to it for a while.
		x.cur.prefills.refused(model, time.Now())
	}
	status := 0
	if refused {
		status = next.resp.StatusCode
	}
	next, err = r.judged(next, err, record.ContinuationOK, prefill, broke)
	switch {
	case err == nil:
		s.begin(cut)
	case refused:
		// One break, one record: the replay's says the prefill was
		// refused.
		x.rec.Continuations = x.rec.Continuations[:len(x.rec.Continuations)-1]
		return s.replay(r, broke, fmt.Sprintf("its prefill was refused with %d", status))
	}
	return next, err
}

// replay sends the caller's request again, as it was, to the upstream
// the request is at, and carries the caller's stream on with the part of
// its answer past the answer so far, which the answer must start with
// (see beginReplay): a model that takes no prefill and answers the same
// request with the same text (at temperature 0, say) is carried on so.
// A model whose replay differed lately is not replayed again. why says
// why a prefill was not sent, or that it was refused: the replay's record
// starts with it.
func (s *splice) replay(r *relay, broke error, why string) (*continued, error) {
	x := r.x
	reason := func(more string) string {
		switch {
		case more == "":
			return why
		case why == "":
			return more
		}
		return why + "; " + more
	}
	if x.cur.replays.within(x.modelKey(), time.Now()) {
		why := reason(fmt.Sprintf("model %q answers a replay with other text", x.rec.Model))
		r.note(record.ContinuationUnsupported, why, 0)
		return nil, &notContinued{broke, why}
	}
	if more := r.bounded(); more != "" {
		why := reason(more)
		r.note(record.ContinuationUnsupported, why, 0)
		return nil, &notContinued{broke, why}
	}
	r.n++
	x.body = x.callerBody
	x.fields, _ = readFields(x.body)
	next, err := x.again(x.cur.stream, func(ctx context.Context) *http.Request { return x.outbound(ctx, x.cur) }, 0)
	next, err = r.judged(next, err, record.ContinuationReplayed, 0, broke)
	if cs := x.rec.Continuations; len(cs) > 0 {
		cs[len(cs)-1].Reason = reason(cs[len(cs)-1].Reason)
	}
	if err == nil {
		s.beginReplay()
	}
	return next, err
}

// refusals are the models of one upstream that would not be carried on
// one way (a prefill refused, a replay that differed), each with when;
// at most maxRefusals, since a model is the caller's to name. It is safe
// for concurrent use.
type refusals struct {
	mu sync.Mutex // guards at
	at map[string]time.Time
}

// maxRefusals bounds the models an upstream remembers.
const maxRefusals = 1024

// refused notes that model refused at now.
func (f *refusals) refused(model string, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at == nil {
		f.at = map[string]time.Time{}
	}
	if _, ok := f.at[model]; !ok && len(f.at) >= maxRefusals {
		// Make room: the expired first, then any.
		for m, at := range f.at {
			if now.Sub(at) >= prefillMemory {
				delete(f.at, m)
			}
		}
		for m := range f.at {
			if len(f.at) < maxRefusals {
				break
			}
			delete(f.at, m)
		}
	}
	f.at[model] = now
}

// within reports whether model refused within prefillMemory of now.
func (f *refusals) within(model string, now time.Time) bool {
	f.mu.Lock()
	at, ok := f.at[model]
	f.mu.Unlock()
	return ok && now.Sub(at) < prefillMemory
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
		if u.carry == ContinuePrefill {
			ups = append(ups, u)
		}
	}
	if len(ups) <= 1 {
		return x.cur.stream
	}
	return &outlast.Fallback{
		Upstreams: streamsOf(ups),
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

// streamsOf returns the stream Transports of ups.
func streamsOf(ups []*upstream) []*outlast.Transport {
	trs := make([]*outlast.Transport, len(ups))
	for i, u := range ups {
		trs[i] = u.stream
	}
	return trs
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
