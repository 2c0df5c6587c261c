package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/outlast-llm/outlast/internal/sse"
)

// delta is a Responses API stream's usual event, as OpenAI sends it.
var delta = sse.Event{
	Name:    []byte("response.output_text.delta"),
	Data:    []byte(`{"type":"response.output_text.delta","sequence_number":7,"item_id":"msg_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654","output_index":0,"content_index":0,"delta":" world","logprobs":[],"obfuscation":"uVLd6GxPq"}`),
	HasData: true,
}

// event forwards each event once, notes the response's id from its first
// events and the sequence number of the last, and tells the stream's end,
// its failure, and an event that makes it unresumable.
func TestResumerEvent(t *testing.T) {
	named := func(name, data string) sse.Event {
		return sse.Event{Name: []byte(name), Data: []byte(data), HasData: true}
	}
	for _, c := range []struct {
		name    string
		events  []sse.Event
		id      string
		seq     int64
		end     bool
		failed  bool
		why     string
		dropped int // events not forwarded
	}{
		{
			name: "created, then content",
			events: []sse.Event{
				named("response.created", `{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"queued"}}`),
				named("response.in_progress", `{"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_other"}}`),
				delta,
			},
			id: "resp_1", seq: 7,
		},
		{
			name: "an escaped id",
			events: []sse.Event{
				named("response.created", `{"sequence_number":0,"response":{"status":"queued","id":"resp_\u00e9\/1"}}`),
			},
			id: "resp_é/1", seq: 0,
		},
		{
			name: "the id from a later event",
			events: []sse.Event{
				named("response.created", `{"type":"response.created","sequence_number":0}`),
				named("response.in_progress", `{"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_2"}}`),
			},
			id: "resp_2", seq: 1,
		},
		{
			name: "events the caller has are dropped",
			events: []sse.Event{
				named("response.created", `{"sequence_number":0,"response":{"id":"resp_1"}}`),
				named("response.in_progress", `{"sequence_number":1}`),
				named("response.created", `{"sequence_number":0,"response":{"id":"resp_1"}}`),
				named("response.in_progress", `{"sequence_number":1}`),
				named("response.output_text.delta", `{"sequence_number":2}`),
			},
			id: "resp_1", seq: 2, dropped: 2,
		},
		{
			name:   "completed",
			events: []sse.Event{named("response.completed", `{"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","status":"completed"}}`)},
			id:     "resp_1", seq: 9, end: true,
		},
		{
			name:   "incomplete, unnamed",
			events: []sse.Event{{Data: []byte(`{"type":"response.incomplete","sequence_number":9}`), HasData: true}},
			seq:    9, end: true,
		},
		{
			name:   "failed",
			events: []sse.Event{named("response.failed", `{"type":"response.failed","sequence_number":4,"response":{"id":"resp_1","error":{"code":"server_error"}}}`)},
			id:     "resp_1", seq: 4, end: true, failed: true,
		},
		{
			name:   "an error event",
			events: []sse.Event{named("error", `{"type":"error","code":"server_error","message":"x","sequence_number":4}`)},
			seq:    4, end: true, failed: true,
		},
		{
			name:   "a dropped end ends nothing",
			events: []sse.Event{named("response.in_progress", `{"sequence_number":5}`), named("response.completed", `{"sequence_number":5}`)},
			seq:    5, dropped: 1,
		},
		{
			name:   "without a sequence number",
			events: []sse.Event{named("response.created", `{"type":"response.created","response":{"id":"resp_1"}}`), delta},
			seq:    7, why: "an event without a sequence_number",
		},
		{
			name:   "a null sequence number, last of two",
			events: []sse.Event{named("x", `{"sequence_number":1,"sequence_number":null}`)},
			seq:    -1, why: "an event without a sequence_number",
		},
		{
			name: "sequence numbers that are not whole numbers",
			events: []sse.Event{
				named("x", `{"sequence_number":1.5}`), named("x", `{"sequence_number":"2"}`),
				named("x", `{"sequence_number":1e3}`), named("x", `{"sequence_number":01}`),
				named("x", `{"sequence_number":99999999999999999999}`),
			},
			seq: -1, why: "an event without a sequence_number",
		},
		{
			name:   "data that is not JSON",
			events: []sse.Event{named("x", `{"sequence_number":3,"delta":"cut`), named("x", `[DONE]`), named("x", `{"sequence_number":3} x`)},
			seq:    -1, why: "an event without a sequence_number",
		},
		{
			name:   "an event without data",
			events: []sse.Event{{Name: []byte("ping")}},
			seq:    -1,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs := newResumer()
			dropped := 0
			for _, ev := range c.events {
				raw := []byte("event")
				out, err := rs.event(raw, ev)
				if err != nil {
					t.Fatalf("event %s: %v", ev.Data, err)
				}
				if out == nil {
					dropped++
				} else if string(out) != "event" {
					t.Errorf("event %s: forwarded %q, want it as it came", ev.Data, out)
				}
			}
			if rs.id != c.id || rs.seq != c.seq || rs.end != c.end || rs.failed != c.failed || rs.why != c.why || dropped != c.dropped {
				t.Errorf("got id %q, seq %d, end %v, failed %v, why %q, %d dropped; want %q, %d, %v, %v, %q, %d",
					rs.id, rs.seq, rs.end, rs.failed, rs.why, dropped, c.id, c.seq, c.end, c.failed, c.why, c.dropped)
			}
		})
	}
}

// An output_text.delta, once the id is known, costs its resumer no
// allocation.
func TestResumerEventAllocs(t *testing.T) {
	// Not parallel: AllocsPerRun counts every allocation in the process.
	rs := &resumer{id: "resp_1"}
	if n := testing.AllocsPerRun(100, func() {
		rs.seq = 6
		rs.event(delta.Data, delta)
	}); n != 0 {
		t.Errorf("got %v allocations for an output_text.delta, want 0", n)
	}
}

func BenchmarkResumerEvent(b *testing.B) {
	rs := &resumer{id: "resp_1"}
	b.ReportAllocs()
	for b.Loop() {
		rs.seq = 6
		rs.event(delta.Data, delta)
	}
}

// request asks for the response by its id, escaped once in the path, a
// slash in it included.
func TestResumeRequest(t *testing.T) {
	x := &exchange{
		r:    httptest.NewRequest(http.MethodPost, "/openai/v1/responses", nil),
		path: "/v1/responses",
		cur:  &upstream{Upstream: Upstream{URL: &url.URL{Scheme: "http", Host: "up.test", Path: "/base"}}},
	}
	for _, c := range []struct {
		id, method, tail, query string
		want                    string
	}{
		{"resp_1", http.MethodGet, "", "stream=true&starting_after=3", "http://up.test/base/v1/responses/resp_1?stream=true&starting_after=3"},
		{"resp_1", http.MethodPost, "/cancel", "", "http://up.test/base/v1/responses/resp_1/cancel"},
		{"resp a%b", http.MethodPost, "/cancel", "", "http://up.test/base/v1/responses/resp%20a%25b/cancel"},
		{"resp/1?", http.MethodGet, "", "stream=true", "http://up.test/base/v1/responses/resp%2F1%3F?stream=true"},
	} {
		rs := &resumer{id: c.id}
		req := rs.request(context.Background(), x, c.method, c.tail, c.query)
		if got := req.URL.String(); req.Method != c.method || got != c.want {
			t.Errorf("%q%s: got %s %s, want %s %s", c.id, c.tail, req.Method, got, c.method, c.want)
		}
		if req.Body != http.NoBody || req.ContentLength != 0 {
			t.Errorf("%q%s: the request has a body", c.id, c.tail)
		}
	}
}
