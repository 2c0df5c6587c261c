package timeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"
)

// The event stream's bounds and rhythms.
const (
	// clientBuffer bounds the events waiting to be written to one client.
	// Past it the Observer drops the client's events rather than wait,
	// and the client gets a snapshot instead when it catches up.
	clientBuffer = 256

	// upstreamsEvery is how often a stream looks at the slots for a
	// change that no request event shows, such as a slot's release.
	upstreamsEvery = time.Second

	// upstreamsSoon is how long after a request event a stream sends the
	// slots, so that a burst of events costs one look.
	upstreamsSoon = 50 * time.Millisecond

	// heartbeatEvery keeps an idle stream's connection from being cut by
	// a proxy between the gateway and the browser.
	heartbeatEvery = 15 * time.Second

	// writeTimeout ends the stream of a client that stopped reading.
	writeTimeout = 10 * time.Second
)

// event is one change to send: a request's new state, or for
// eventState an upstream's.
type event struct {
	name  string
	req   Request
	state StateChange
}

// client is one event stream's mailbox.
type client struct {
	events chan event
	resync chan struct{} // signalled when events were dropped; capacity 1
	stale  bool          // guarded by Feed.mu: events were dropped since the last snapshot
}

// publish offers ev to every client without waiting: it runs on the
// gateway's request path.
func (f *Feed) publish(ev event) {
	for c := range f.clients {
		if c.stale {
			f.dropped++ // the coming snapshot will hold it
			continue
		}
		select {
		case c.events <- ev:
		default:
			f.dropped++
			c.stale = true
			select {
			case c.resync <- struct{}{}:
			default:
			}
		}
	}
}

// subscribe adds a client and returns it with the snapshot that its
// events follow: both are taken under mu, so that none is missed or
// applied before the state it changes.
func (f *Feed) subscribe() (*client, Snapshot) {
	c := &client{events: make(chan event, clientBuffer), resync: make(chan struct{}, 1)}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clients[c] = struct{}{}
	return c, f.snapshotLocked(f.keep)
}

func (f *Feed) unsubscribe(c *client) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.clients, c)
}

// catchUp empties c's mailbox and returns a snapshot that replaces what
// was dropped, under mu so that the events after it are exactly the
// changes after it.
func (f *Feed) catchUp(c *client) Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(c.events) > 0 {
		<-c.events
	}
	c.stale = false
	return f.snapshotLocked(f.keep)
}

// serveEvents serves the event stream (GET /outlast/events): a
// "snapshot" event, then an event per change to a request ("queued",
// "attempt-start", "attempt-end", "done"), a "state" event per change of
// an upstream's admission state, an "upstreams" event when the slots
// change, and a comment as a heartbeat.
func (f *Feed) serveEvents(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		http.Error(w, "outlast: /outlast/events takes GET", http.StatusMethodNotAllowed)
		return
	}
	select {
	case <-f.closed:
		http.Error(w, "outlast: the timeline is closed", http.StatusServiceUnavailable)
		return
	default:
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: pass events on as they come
	c, snap := f.subscribe()
	defer f.unsubscribe(c)
	s := &stream{f: f, c: c, w: w, rc: http.NewResponseController(w)}
	s.buf.WriteString("retry: 2000\n\n")
	s.snapshot(snap)
	if s.flush() != nil {
		return
	}
	s.run(r.Context())
}

// stream writes one client's events.
type stream struct {
	f    *Feed
	c    *client
	w    http.ResponseWriter
	rc   *http.ResponseController
	buf  bytes.Buffer // what the next flush writes
	last []byte       // the upstreams last sent
}

// run writes events until the client leaves, a write fails or times out,
// or the feed is closed.
func (s *stream) run(ctx context.Context) {
	tick := time.NewTicker(upstreamsEvery)
	defer tick.Stop()
	beat := time.NewTicker(heartbeatEvery)
	defer beat.Stop()
	var soon <-chan time.Time // nil while no slots event is due
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.f.closed:
			return
		case ev := <-s.c.events:
			s.event(ev)
			s.pending()
			if soon == nil {
				soon = time.After(upstreamsSoon)
			}
		case <-s.c.resync:
			s.snapshot(s.f.catchUp(s.c))
		case <-soon:
			soon = nil
			s.upstreams()
		case <-tick.C:
			s.upstreams()
		case <-beat.C:
			s.buf.WriteString(": ping\n\n")
		}
		if s.flush() != nil {
			return
		}
	}
}

// pending adds the events already waiting, so that a burst is one write.
func (s *stream) pending() {
	for range clientBuffer {
		select {
		case ev := <-s.c.events:
			s.event(ev)
		default:
			return
		}
	}
}

func (s *stream) event(ev event) {
	if ev.name == eventState {
		s.write(ev.name, ev.state)
		return
	}
	s.write(ev.name, ev.req)
}

func (s *stream) snapshot(snap Snapshot) {
	snap.Upstreams = s.f.upstreams()
	s.last, _ = json.Marshal(snap.Upstreams)
	s.write("snapshot", snap)
}

// upstreams adds an "upstreams" event if the slots changed since the
// last one.
func (s *stream) upstreams() {
	ups := s.f.upstreams()
	b, _ := json.Marshal(ups)
	if bytes.Equal(b, s.last) {
		return
	}
	s.last = b
	s.write("upstreams", struct {
		Now       float64         `json:"now"`
		Upstreams json.RawMessage `json:"upstreams"`
	}{millis(time.Now()), b})
}

// write adds an event to the buffer. JSON has no raw newlines, so the
// data is one line.
func (s *stream) write(name string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return // the views are plain data: never
	}
	s.buf.WriteString("event: ")
	s.buf.WriteString(name)
	s.buf.WriteString("\ndata: ")
	s.buf.Write(b)
	s.buf.WriteString("\n\n")
}

// flush writes the buffer, bounded by writeTimeout.
func (s *stream) flush() error {
	if s.buf.Len() == 0 {
		return nil
	}
	err := s.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if _, err := s.w.Write(s.buf.Bytes()); err != nil {
		return err
	}
	s.buf.Reset()
	return s.rc.Flush()
}
