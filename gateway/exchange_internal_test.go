package gateway

import (
	"log/slog"
	"net/url"
	"testing"
)

// bodyFor renames the model to the JSON string of the upstream's name for
// it, and the request pays one allocation at most, the body it sends: the
// names' JSON is made once, with the upstream.
func TestBodyFor(t *testing.T) {
	// Not parallel: AllocsPerRun counts every allocation in the process.
	u, err := newUpstream(0, Upstream{URL: &url.URL{Scheme: "http", Host: "up.test"}, Models: map[string]string{
		"gpt-4o": "my-deployment",
		"quoted": `a "b"`, // a name JSON must escape
	}}, nil, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ body, want string }{
		{`{"model":"gpt-4o","messages":[]}`, `{"model":"my-deployment","messages":[]}`},
		{`{"model":"quoted"}`, `{"model":"a \"b\""}`},
		// A model the upstream does not rename is sent as it came.
		{`{"model":"other"}`, `{"model":"other"}`},
	} {
		body := []byte(c.body)
		f, _ := scanBody(body)
		x := &exchange{body: body, fields: f}
		if got := string(x.bodyFor(u)); got != c.want {
			t.Errorf("%s: got %s, want %s", c.body, got, c.want)
		}
		// One at most: a small body may be made on the stack.
		if n := testing.AllocsPerRun(100, func() { x.bodyFor(u) }); n > 1 {
			t.Errorf("%s: got %v allocations, want at most 1", c.body, n)
		}
	}
}
