package journal

import "github.com/outlast-llm/outlast/gateway"

// ObserverConfig says what the gateway's observer records beyond the
// request and its attempts.
type ObserverConfig struct {
	// Headers keeps each request's headers, credentials and the gateway's
	// Redact list left out. False, the default, keeps none: encoding and
	// storing them was the larger part of the journal's cost per request.
	Headers bool
}

// Observer returns a gateway.Observer that adds each finished request to
// w. It never blocks the request: a full writer drops and counts it.
func Observer(w *Writer, cfg ObserverConfig) gateway.Observer {
	return gateway.Observer{Done: func(r *gateway.Request) { w.Add(FromRequest(r, cfg)) }}
}

// FromRequest makes the record of a request the gateway finished. The
// bytes forwarded belong to the last attempt when the response was
// committed: the failed attempts before it were drained, never forwarded.
func FromRequest(r *gateway.Request, cfg ObserverConfig) Record {
	rec := Record{
		ID: r.ID, Run: r.Run, Method: r.Method, Path: r.Path, Upstream: r.Upstream,
		Slot: r.Slot, Model: r.Model,
		Start: r.Start, End: r.End, Status: r.Status, Error: r.Error,
		Stream: r.Stream, Committed: r.Committed, Bytes: r.Bytes,
		Attempts: make([]Attempt, len(r.Attempts)),
	}
	if cfg.Headers {
		rec.Header = Redact(r.Header, nil)
	}
	for i, a := range r.Attempts {
		rec.Attempts[i] = FromAttempt(a)
	}
	if n := len(rec.Attempts); n > 0 && r.Committed {
		rec.Attempts[n-1].Bytes = r.Bytes
	}
	return rec
}
