// Package owned marks a context whose requests each have a header map of
// their own, made for the request alone, that nothing else reads while
// the request is sent. The outlast Transport sets its attempt header in
// such a map for a request's first attempt, rather than copy the map as
// an http.RoundTripper must copy a caller's. The gateway, which gives
// every request it sends upstream a map of its own (the caller's, stripped,
// for the only request made from it, or a copy), marks its contexts; no
// caller outside this module can.
package owned

import "context"

type key struct{}

// Headers returns ctx marked: the header maps of the requests made with
// it are their own.
func Headers(ctx context.Context) context.Context {
	return context.WithValue(ctx, key{}, true)
}

// HasHeaders reports whether ctx was marked by Headers.
func HasHeaders(ctx context.Context) bool {
	return ctx.Value(key{}) != nil
}
