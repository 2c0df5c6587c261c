package gateway

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/outlast-llm/outlast/internal/jsonscan"
	"github.com/outlast-llm/outlast/internal/redact"
	"github.com/outlast-llm/outlast/internal/sse"
	"github.com/outlast-llm/outlast/record"
)

// cancelTimeout bounds the request that cancels a background response
// nobody will read.
const cancelTimeout = 5 * time.Second

// resumer follows a stream of OpenAI's Responses API that its upstream
// makes in background (see ContinueResume): it notes the response's id
// and the sequence number of the last event forwarded, so that a break
// is resumed after it, and forwards each event once.
type resumer struct {
	id     string // the response's, from its first event
	seq    int64  // the sequence_number of the last event forwarded; -1 before any
	end    bool   // the stream's last event came: the response completed, incomplete or failed
	failed bool   // and it was a failure, which the caller has
	why    string // why the stream cannot be resumed, once known
}

func newResumer() *resumer { return &resumer{seq: -1} }

// resumable reports whether the request is one its upstream resumes: a
// stream of the Responses API's create, sent in background.
func (x *exchange) resumable() bool {
	return x.r.Method == http.MethodPost && strings.HasSuffix(x.path, "/responses") &&
		x.rec.Stream && x.fields.store >= 0 && x.fields.background >= 0
}

// event forwards ev unless the caller has it from before a resumption,
// and notes its sequence number and, while it is not known, the
// response's id, which the first events carry (response.created). It
// walks the data without decoding it, as a relay asks it of every event
// it forwards: it reads the sequence number, decodes the id only while
// it is not known, and tells the end and the failure as sse does.
func (rs *resumer) event(raw []byte, ev sse.Event) ([]byte, error) {
	if !ev.HasData {
		return raw, nil
	}
	var (
		seq      int64
		hasSeq   bool
		response []byte
	)
	s := jsonscan.Scanner{B: ev.Data}
	ok := s.Members(func(key, v []byte) {
		switch string(key) {
		case "sequence_number":
			seq, hasSeq = wholeNumber(v)
		case "response":
			response = v
		}
	})
	if s.Space(); !ok || s.I != len(ev.Data) || !hasSeq {
		if rs.why == "" {
			rs.why = "an event without a sequence_number"
		}
		return raw, nil
	}
	if seq <= rs.seq {
		return nil, nil // the caller has it, from before the resumption
	}
	rs.seq = seq
	if rs.id == "" {
		rs.id = responseID(response)
	}
	switch {
	case sse.IsFailure(&ev):
		rs.end, rs.failed = true, true
	case sse.IsEnd(&ev):
		rs.end = true
	}
	return raw, nil
}

// responseID returns the id of v, a response object, or "" if v is not
// one or has no id that is a string.
func responseID(v []byte) string {
	var id string
	if len(v) > 0 && v[0] == '{' {
		s := jsonscan.Scanner{B: v}
		s.Members(func(key, w []byte) {
			if string(key) == "id" {
				id = ""
				if len(w) >= 2 && w[0] == '"' {
					id = jsonString(w)
				}
			}
		})
	}
	return id
}

// wholeNumber reads v, a JSON number, as an int64, and reports whether it
// is one: an integer, without fraction or exponent, that fits.
func wholeNumber(v []byte) (int64, bool) {
	neg := len(v) > 0 && v[0] == '-'
	if neg {
		v = v[1:]
	}
	// Nineteen digits at most, which a uint64 holds: int64's bounds have
	// nineteen.
	if len(v) == 0 || len(v) > 19 || len(v) > 1 && v[0] == '0' {
		return 0, false
	}
	var n uint64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	switch {
	case neg && n <= 1<<63:
		return int64(-n), true
	case !neg && n < 1<<63:
		return int64(n), true
	}
	return 0, false
}

// passed takes an event too long to hold: its sequence number is not
// known, so what follows it cannot be asked for.
func (rs *resumer) passed(sse.Event) {
	if rs.why == "" {
		rs.why = "an event too long to hold"
	}
}

// ended: a resumed stream is whole at its last event, and broken at any
// end before it, a clean one included.
func (rs *resumer) ended(error) streamEnd {
	switch {
	case rs.failed:
		return endFailed
	case rs.end:
		return endWhole
	}
	return endBroken
}

// carryOn streams the rest of the response from the upstream the request
// is at, after the last event forwarded, as a retry of the stream that
// broke.
func (rs *resumer) carryOn(r *relay, broke error) (*continued, error) {
	why := rs.why
	if why == "" && rs.id == "" {
		why = "no response id came before the break"
	}
	if why == "" {
		why = r.bounded()
	}
	if why != "" {
		r.note(record.ContinuationUnsupported, why, 0)
		return nil, &notContinued{broke, why}
	}
	r.n++
	x := r.x
	next, err := x.again(x.cur.stream, func(ctx context.Context) *http.Request {
		return rs.request(ctx, x, http.MethodGet, "", "stream=true&starting_after="+strconv.FormatInt(rs.seq, 10))
	}, 0)
	return r.judged(next, err, record.ContinuationResumed, 0, broke)
}

// request returns a request with method, and no body, for the
// response's path followed by tail ("" or "/cancel") and query; with the
// caller's headers and the upstream's credential, as the request that
// created it had.
func (rs *resumer) request(ctx context.Context, x *exchange, method, tail, query string) *http.Request {
	path := x.path + "/" + rs.id + tail
	out := x.cur.outbound(ctx, x.r, path, false)
	out.URL = x.cur.target(path, query)
	if strings.Contains(rs.id, "/") {
		// A slash in the id is part of it, not a separator: the escaped
		// path says so, which the path alone cannot.
		out.URL.RawPath = x.cur.target(x.path, "").EscapedPath() + "/" + url.PathEscape(rs.id) + tail
	}
	out.Method, out.Body, out.GetBody, out.ContentLength = method, http.NoBody, nil, 0
	x.plainStream(out.Header)
	return out
}

// release cancels the background response once the relay is done with a
// stream that did not reach its end: nobody will read the rest, and it
// must not go on generating, and billing, for nobody.
func (rs *resumer) release(r *relay) {
	if rs.end || rs.id == "" {
		return
	}
	x := r.x
	ctx, cancel := context.WithTimeout(context.WithoutCancel(x.r.Context()), cancelTimeout)
	defer cancel()
	req := rs.request(ctx, x, http.MethodPost, "/cancel", "")
	resp, err := x.cur.transport.Base.RoundTrip(req)
	if err == nil {
		discardBody(resp)
		if resp.StatusCode >= 300 {
			err = fmt.Errorf("status %s", resp.Status)
		}
	}
	if err != nil {
		x.g.logger.Warn("outlast: cancelling the background response failed", "id", x.rec.ID, "upstream", x.cur.Name, "error", redact.Text(err.Error()))
		return
	}
	x.g.logger.Info("outlast: cancelled the background response no caller reads", "id", x.rec.ID, "upstream", x.cur.Name)
}

// withBackground returns body, a JSON object, with "background": true as
// its first member.
func withBackground(body []byte) []byte {
	i := bytes.IndexByte(body, '{')
	if i < 0 {
		return body
	}
	rest := body[i+1:]
	member := `"background":true`
	if len(bytes.TrimLeft(rest, " \t\r\n")) > 0 && bytes.TrimLeft(rest, " \t\r\n")[0] != '}' {
		member += ","
	}
	b := make([]byte, 0, len(body)+len(member))
	return append(append(append(b, body[:i+1]...), member...), rest...)
}
