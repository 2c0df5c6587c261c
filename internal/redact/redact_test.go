package redact_test

import (
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/outlast-llm/outlast/internal/redact"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	h := http.Header{
		"Authorization":       {"Bearer sk"},
		"X-Api-Key":           {"ak"},
		"Cookie":              {"a=b"},
		"Proxy-Authorization": {"Basic x"},
		"Api-Key":             {"azure"},
		"X-Goog-Api-Key":      {"gemini"},
		"X-Org-Secret":        {"org"},
		"Content-Type":        {"application/json"},
		"Accept":              {"text/event-stream", "application/json"},
		"x-lower":             {"not canonical"},
	}
	tests := []struct {
		name  string
		h     http.Header
		extra []string
		want  http.Header
	}{
		// The credentials go, always; the rest stays, canonicalized.
		{"defaults", h, nil, http.Header{
			"Content-Type": {"application/json"}, "Accept": {"text/event-stream", "application/json"},
			"X-Org-Secret": {"org"}, "X-Lower": {"not canonical"},
		}},
		// The deployment's names go too, in any case.
		{"extra", h, []string{"x-ORG-secret", " accept "}, http.Header{
			"Content-Type": {"application/json"}, "X-Lower": {"not canonical"},
		}},
		// No header is nil, not an empty map.
		{"nil", nil, nil, nil},
	}
	for _, c := range tests {
		if got := redact.Header(c.h, c.extra); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
	// Redact copies: changing its result leaves the request alone.
	redact.Header(h, nil)["Content-Type"][0] = "changed"
	if got := h.Get("Content-Type"); got != "application/json" {
		t.Errorf("after changing Redact's result: got %q, want application/json", got)
	}
}

func TestText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		// The common case: no URL, unchanged.
		{"no url", "dial tcp 127.0.0.1:1: connect: connection refused", "dial tcp 127.0.0.1:1: connect: connection refused"},
		// url.Error's form: the quoted URL loses its query.
		{"url error", `Post "https://api.example.com/v1/chat?key=s3&x=1": EOF`, `Post "https://api.example.com/v1/chat": EOF`},
		// User info is a credential too; the last @ ends it.
		{"user info", "http://u:p@ss@host:8080/p?q", "http://host:8080/p"},
		// A fragment goes as the query does.
		{"fragment", "see https://h/p#tok=x now", "see https://h/p now"},
		// Every URL in the message, not only the first.
		{"two", "a http://x/?k=1 b 'https://y/z?k=2'", "a http://x/ b 'https://y/z'"},
		// An @ in the path is not user info.
		{"at in path", "http://h/@me?x", "http://h/@me"},
		// A URL that is all query.
		{"bare", "http://?k=v", "http://"},
		// A query with no URL before it goes too, to the end of its word.
		{"query alone", "GET /v1/chat?api_key=s3: refused", "GET /v1/chat refused"},
		// A '#' before the scheme is not the URL's fragment (it crashed the
		// tracer's sanitizer once).
		{"hash before scheme", "a#b://u@h/p", "a#b://h/p"},
		// A URL at the end of the message.
		{"at end", "failed: ws://h/s?t=1", "failed: ws://h/s"},
	}
	for _, c := range tests {
		if got := redact.Text(c.in); got != c.want {
			t.Errorf("%s: Text(%q): got %q, want %q", c.name, c.in, got, c.want)
		}
	}
}

// FuzzText checks that Text never panics, and that for a URL with
// a query, alone or quoted in an error as url.Error quotes it, none of the
// query's values survive unless the rest of the URL holds them too.
func FuzzText(f *testing.F) {
	for _, s := range []string{
		"https://api.example.com/v1/chat?key=secret",
		"http://u:p@h/p?a=1&b=2#f",
		"http://h?x",
		"a://b://c?d=e",
		"http://h/p?k=v&k=w;x=y",
		"no url here",
		"://?=",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		redact.Text(s) // must not panic, whatever s is
		u, err := url.Parse(s)
		if err != nil || u.Scheme == "" || u.Host == "" || u.RawQuery == "" {
			return
		}
		if strings.ContainsAny(s, " \t\n\r\v\f\"'`<>") {
			return // these end a URL in a message; see Text
		}
		q := strings.IndexByte(s, '?')
		quote := func(s string) string { return fmt.Sprintf("Get %q: EOF", s) }
		for _, form := range []func(string) string{func(s string) string { return s }, quote} {
			msg := redact.Text(form(s))
			keep := redact.Text(form(s[:q])) // the message without the query
			if strings.Count(msg, "?") > strings.Count(keep, "?") {
				t.Errorf("Text(%q) = %q: got a '?', want the query gone", form(s), msg)
			}
			for _, kv := range strings.FieldsFunc(u.RawQuery, func(r rune) bool { return r == '&' || r == ';' }) {
				_, v, _ := strings.Cut(kv, "=")
				if v != "" && strings.Contains(msg, v) && !strings.Contains(keep, v) {
					t.Errorf("Text(%q) = %q: got the query value %q, want it gone", form(s), msg, v)
				}
			}
		}
	})
}

// Every credential header is one, in any case, and the list cannot be
// changed through what Credentials returns.
func TestCredentials(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"authorization", "SET-COOKIE", "x-api-key", "Api-Key", "x-goog-api-key", "Proxy-Authorization", "cookie"} {
		if !redact.IsCredential(name) {
			t.Errorf("IsCredential(%q): got false, want true", name)
		}
	}
	if redact.IsCredential("Content-Type") {
		t.Error("IsCredential(Content-Type): got true, want false")
	}
	redact.Credentials()[0] = "X-Nothing"
	if !redact.IsCredential("Authorization") {
		t.Error("after changing Credentials' result: Authorization is no longer a credential")
	}
}

// URL keeps only the scheme, host and path: a key may be in any of the
// user info, the query or the fragment.
func TestURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"https://api.example.com/v1?key=secret", "https://api.example.com/v1"},
		{"http://u:p@h:8080/base/v1#frag", "http://h:8080/base/v1"},
		{"http://h", "http://h"},
	} {
		u, err := url.Parse(c.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := redact.URL(u); got != c.want {
			t.Errorf("URL(%q): got %q, want %q", c.in, got, c.want)
		}
	}
	if got := redact.URL(nil); got != "" {
		t.Errorf("URL(nil): got %q, want \"\"", got)
	}
}
