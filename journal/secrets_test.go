package journal_test

import (
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/internal/redact"
	"github.com/outlast-llm/outlast/journal"
	"github.com/outlast-llm/outlast/record"
)

// TestSecretsNeverStored writes requests whose headers and errors carry
// secrets, through a Writer, and then reads every column of every row of
// every table as text: "secret" must appear nowhere.
func TestSecretsNeverStored(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		spec := b.fresh(t)
		s := open(t, spec)
		h := http.Header{}
		h.Set("Authorization", "Bearer sk-secret")
		h.Set("X-Api-Key", "ak-secret")
		h.Set("Cookie", "s=secret")
		h.Set("Proxy-Authorization", "Basic c2VjcmV0")
		h.Set("X-Custom-Token", "ct-secret")
		h.Set("Content-Type", "application/json")

		// The gateway's way: redact.Header with its list, and
		// record.NewAttempt of an attempt the Transport has classified.
		redacted := request("redacted", "", t0, 502, 0)
		redacted.Header = redact.Header(h, []string{"x-custom-token"})
		a := outlast.Attempt{
			CallID: "c1", N: 1, Start: t0, End: t0,
			Err: &url.Error{Op: "Post", URL: "https://user:pw-secret@api.example.com/v1/chat?key=qs-secret&x=1", Err: syscall.ECONNREFUSED},
		}
		a.Class = outlast.Classify(a.Err)
		redacted.Attempts = []record.Attempt{record.NewAttempt(a)}

		// A careless caller: the raw header, and a raw message. The store
		// still removes the credentials and the URL's query, though it
		// cannot know the deployment's own list.
		careless := request("careless", "", t0, 500, 1)
		hc := h.Clone()
		hc.Del("X-Custom-Token")
		careless.Header = hc
		careless.Error = "upstream https://api.example.com/x?token=kind-secret"
		careless.Attempts[0].Error = `Get "http://h.example/v1?api_key=raw-secret": EOF`

		w := journal.NewWriter(s, journal.WriterConfig{Logger: quiet})
		w.Add(redacted)
		w.Add(careless)
		closeWriter(t, w)

		all := dump(t, b, spec)
		if strings.Contains(strings.ToLower(all), "secret") {
			t.Errorf("a secret reached the store:\n%s", all)
		}
		// The dump saw the rows: what is not secret is there.
		for _, want := range []string{"application/json", "https://api.example.com/v1/chat", "refused", "http://h.example/v1"} {
			if !strings.Contains(all, want) {
				t.Errorf("dump: got no %q, want it:\n%s", want, all)
			}
		}
	})
}
