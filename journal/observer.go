package journal

import (
	"slices"

	"github.com/outlast-llm/outlast/record"
)

// ObserverConfig says what the journal's observer keeps beyond the request
// and its attempts.
type ObserverConfig struct {
	// Headers keeps each request's headers, as the gateway reports them:
	// without credentials and the names it was told to redact. False, the
	// default, keeps none: encoding and storing them was the larger part
	// of the journal's cost per request.
	Headers bool
}

// Observer returns a record.Observer that adds each finished request to w,
// and each change of an upstream's state. It never blocks the request or
// the change: a full writer drops and counts them.
func Observer(w *Writer, cfg ObserverConfig) record.Observer {
	return record.Observer{
		Headers: cfg.Headers,
		Done: func(r *record.Request) {
			rec := *r
			// The writer keeps the record past the call; the gateway's
			// lists of attempts and moves are its own. Its header map is
			// made for the record and never changed after Done, so it is
			// kept as it is.
			rec.Attempts, rec.Moves = slices.Clone(r.Attempts), slices.Clone(r.Moves)
			if !cfg.Headers {
				rec.Header = nil
			}
			w.Add(rec)
		},
		UpstreamState: func(c record.StateChange) { w.AddState(c) },
	}
}
