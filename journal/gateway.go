package journal

import "github.com/outlast-llm/outlast/gateway"

// Observer returns a gateway.Observer that adds each finished request to
// w. It never blocks the request: a full writer drops and counts it.
func Observer(w *Writer) gateway.Observer {
	return gateway.Observer{Done: func(r *gateway.Request) { w.Add(FromRequest(r)) }}
}

// FromRequest makes the record of a request the gateway finished. The
// bytes forwarded belong to the last attempt when the response was
// committed: the failed attempts before it were drained, never forwarded.
func FromRequest(r *gateway.Request) Record {
	rec := Record{
		ID: r.ID, Run: r.Run, Method: r.Method, Path: r.Path, Upstream: r.Upstream,
		Slot: r.Slot, Model: r.Model, Header: Redact(r.Header, nil),
		Start: r.Start, End: r.End, Status: r.Status, Error: r.Error,
		Stream: r.Stream, Committed: r.Committed, Bytes: r.Bytes,
		Attempts: make([]Attempt, len(r.Attempts)),
	}
	for i, a := range r.Attempts {
		rec.Attempts[i] = FromAttempt(a)
	}
	if n := len(rec.Attempts); n > 0 && r.Committed {
		rec.Attempts[n-1].Bytes = r.Bytes
	}
	return rec
}
