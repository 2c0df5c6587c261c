// Package timeline is the gateway's live page: GET /outlast/ shows each
// upstream's slots and queue, and the recent requests as a timeline in
// which each attempt is a bar coloured by how it ended (an answer cut
// after bytes is amber, not green, and a hedge's loser grey), titled with
// record.Request.Ending's words, the waits between attempts are labelled
// gaps, and a server's Retry-After is marked. When an upstream has an
// outlast.Admission, an attempt's wait for it and its probe are marked
// too, and a row above the runs bands each upstream's stretches down,
// probing and recovering. The page's HTML carries the newest requests,
// which its first paint shows; then it updates itself through
// server-sent events from the gateway.
//
// A Feed keeps the most recent requests in memory. It learns of them
// through the gateway's Observer, and serves the page, the event stream
// and a JSON snapshot as the gateway's Endpoints:
//
//	feed := timeline.New(0, 0)
//	g, err := gateway.New(gateway.Config{
//		Upstreams: upstreams,
//		Observer:  feed.Observer(),
//		Endpoints: feed.Endpoints(),
//	})
//	if err != nil { … }
//	feed.SetLoads(g.Loads)
//
// The page's HTML, CSS and JavaScript are embedded in the binary; there
// is no build step and nothing is loaded from elsewhere.
//
// The feed keeps what the page shows of a request (its run, method, path,
// upstream, slot, model, status and attempts), and the last MaxStates
// changes of the upstreams' states, and never a request's headers or
// body. An attempt's error is kept as its class, such as "refused", never
// as its text, which for a transport error holds the upstream URL and so
// the request's query.
package timeline
