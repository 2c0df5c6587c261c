// Package owned marks a context as the gateway's. The requests made with
// it each have a header map of their own, made for the request alone,
// that nothing else reads while the request is sent: the outlast
// Transport sets its attempt header in such a map for a request's first
// attempt, rather than copy the map as an http.RoundTripper must copy a
// caller's. The gateway gives every request it sends upstream a map of
// its own (the caller's, stripped, for the only request made from it, or
// a copy). The mark carries the gateway's exchange, which hears of the
// attempts through its methods (see outlast's callHooks), and holds what
// the exchange's requests share: one context value where several would
// each be an allocation and a step of every lookup. No caller outside
// this module can mark a context.
package owned

import "context"

type key struct{}

// HooksKey is the context key under which outlast.WithHooks keeps a
// request's Hooks. A mark answers it too, with what it carries, so that
// the Transport finds the nearest of the two in one lookup.
type HooksKey struct{}

// Mark returns ctx marked, carrying x, which must not be nil.
func Mark(ctx context.Context, x any) context.Context {
	return &marked{Context: ctx, x: x}
}

// marked is a context that Mark marked.
type marked struct {
	context.Context
	x any
}

func (m *marked) Value(k any) any {
	switch k.(type) {
	case key, HooksKey:
		return m.x
	}
	return m.Context.Value(k)
}

// Of returns what Mark gave ctx, or nil if ctx is not marked.
func Of(ctx context.Context) any {
	return ctx.Value(key{})
}

// HasHeaders reports whether ctx was marked: the header maps of the
// requests made with it are their own.
func HasHeaders(ctx context.Context) bool {
	return Of(ctx) != nil
}
