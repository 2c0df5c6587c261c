package tracing_test

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/record"
)

func TestNoSecrets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want string // what the recorded message must still say: redact.Text's
	}{
		// net/http's own form: the URL quoted, the key in its query.
		{"quoted query", &url.Error{Op: "Post", URL: "https://api.example.com/v1/models/m:generate?key=secret&alt=sse", Err: syscall.ECONNREFUSED},
			`Post "https://api.example.com/v1/models/m:generate": connection refused`},
		// A URL unquoted, mid-sentence.
		{"bare query", errors.New("fetching https://api.example.com/v1?key=secret failed"),
			"fetching https://api.example.com/v1 failed"},
		// A query with no URL before it.
		{"query alone", errors.New("GET /v1/chat?api_key=secret: refused"),
			"GET /v1/chat refused"},
		// User info, with an '@' in the password.
		{"user info", errors.New(`dial "https://user:se@cret@api.example.com/v1": refused`),
			`dial "https://api.example.com/v1": refused`},
		// A fragment is not sent, but a message may still carry one.
		{"fragment", errors.New("bad https://api.example.com/v1#secret"),
			"bad https://api.example.com/v1"},
		// Several URLs, each cleaned.
		{"two urls", errors.New("from http://a/?t=secret to http://b/?t=secret"),
			"from http://a/ to http://b/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr, sr := newRecorded(t)
			// The gateway's way: the attempt's record is made by
			// record.NewAttempt, whose sanitizer is the one a span shows.
			tr.Observer().Done(&record.Request{
				Method: "POST", Path: "/v1/chat", Start: at(0), End: at(10), Status: 502, Error: "unreachable",
				// Headers are never read but for traceparent, whatever
				// the gateway left in them.
				Header: http.Header{"X-Note": {"secret"}, "Authorization": {"Bearer secret"}},
				Attempts: []record.Attempt{attempt(outlast.Attempt{
					N: 1, Start: at(1), End: at(9), Err: tt.err, RetryIn: 1,
				})},
			})
			spans := sr.Ended()
			if len(spans) != 2 {
				t.Fatalf("got %d spans, want 2", len(spans))
			}
			var msg string
			for _, s := range spans {
				texts := []string{s.Name(), s.Status().Description}
				texts = append(texts, values(s.Attributes())...)
				for _, e := range s.Events() {
					texts = append(texts, e.Name)
					texts = append(texts, values(e.Attributes)...)
					if m, ok := attrs(e.Attributes)["exception.message"]; ok {
						msg = m.(string)
					}
				}
				for _, x := range texts {
					if strings.Contains(x, "secret") {
						t.Errorf("%s: got %q, want no secret", label(s), x)
					}
				}
			}
			if msg != tt.want {
				t.Errorf("got exception.message %q, want %q", msg, tt.want)
			}
		})
	}
}

// values are the attributes' keys and values, as text.
func values(kvs []attribute.KeyValue) []string {
	out := make([]string, 0, 2*len(kvs))
	for _, kv := range kvs {
		out = append(out, string(kv.Key), kv.Value.String())
	}
	return out
}
