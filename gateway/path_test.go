package gateway

import (
	"net/url"
	"strings"
	"testing"
)

func TestResolvePath(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in, want string // want "" for an error
	}{
		{"/v1/chat/completions", "/v1/chat/completions"},
		{"", "/"},
		// Dot-segments are removed, raw and encoded, in any case.
		{"/v1/./chat/../models", "/v1/models"},
		{"/a/%2e%2E/b", "/b"},
		{"/a/.%2e/b", "/b"},
		{"/a/b/..", "/a/"},
		{"/a/.", "/a/"},
		// Climbing above the root is refused, however it is spelled.
		{"/..", ""},
		{"/a/../../secret", ""},
		{"/a/%2e%2e/%2e%2e/secret", ""},
		// An encoded slash or a backslash is refused: another server may
		// split the segment, and climb.
		{"/a/..%2f..%2fsecret", ""},
		{"/a/..%2F..%2Fsecret", ""},
		{`/a/..\..\secret`, ""},
		{"/a/..%5c..%5csecret", ""},
		// Escapes are decoded; a bad one is refused.
		{"/v1/models/gpt%2d4o", "/v1/models/gpt-4o"},
		{"/v1/%zz", ""},
		// An empty segment is a segment, not a host.
		{"//evil.test/x", "//evil.test/x"},
		{"*", ""},
	} {
		got, err := resolvePath(c.in)
		switch {
		case c.want == "" && err == nil:
			t.Errorf("resolvePath(%q): got %q, want an error", c.in, got)
		case c.want != "" && (err != nil || got != c.want):
			t.Errorf("resolvePath(%q): got %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

// FuzzResolvePath checks that a resolved path never holds a dot-segment
// or climbs, that resolving it again changes nothing, and that a path
// without dot-segments, slashes encoded or backslashes comes back as it
// decodes.
func FuzzResolvePath(f *testing.F) {
	for _, s := range []string{"/v1/chat", "/a/../b", "/a/%2e%2e/b", "/a/..%2fb", "/%", "//x/./y/", "/a/b/c/../../..", "/é/%C3%A9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := resolvePath(s)
		if err != nil {
			return
		}
		if !strings.HasPrefix(got, "/") {
			t.Fatalf("resolvePath(%q) = %q: want a path from the root", s, got)
		}
		for _, seg := range strings.Split(got[1:], "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("resolvePath(%q) = %q: a dot-segment is left", s, got)
			}
		}
		again, err := resolvePath((&url.URL{Path: got}).EscapedPath())
		if err != nil || again != got {
			t.Fatalf("resolvePath(%q) = %q, and again %q, %v: want the same", s, got, again, err)
		}
		decoded, derr := url.PathUnescape(s)
		if decoded == "" {
			decoded = "/"
		}
		if derr == nil && !strings.Contains(decoded, "/./") && !strings.Contains(decoded, "/../") &&
			!strings.HasSuffix(decoded, "/.") && !strings.HasSuffix(decoded, "/..") && decoded != got {
			t.Fatalf("resolvePath(%q) = %q: a path without dot-segments is its decoding, %q", s, got, decoded)
		}
	})
}
