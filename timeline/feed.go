package timeline

import (
	"cmp"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outlast-llm/outlast/record"
)

// A Feed's bounds, when New is given 0 for them.
const (
	// DefaultKeep is how many requests a Feed keeps.
	DefaultKeep = 1000
	// DefaultKeepBytes bounds the size of the requests a Feed keeps, as
	// JSON: the body of GET /outlast/recent, and of the event stream's
	// snapshot, is no larger.
	DefaultKeepBytes = 4 << 20
)

// MaxAttempts is how many attempts a Request view holds at most: the
// last ones, the one in flight included. Request.Elided counts the
// earlier ones left out. The journal keeps them all.
const MaxAttempts = 100

// MaxStates is how many changes of the upstreams' admission states a Feed
// keeps: the last ones, of every upstream. An outage makes a handful; an
// upstream that flaps for long makes more than the page can show. The
// journal keeps them all.
const MaxStates = 100

// The event stream's event names, besides "snapshot" and "upstreams".
const (
	eventQueued       = "queued"
	eventAttemptStart = "attempt-start"
	eventAttemptEnd   = "attempt-end"
	eventDone         = "done"
	eventState        = "state" // an upstream's state changed
)

// A Feed keeps the most recent requests through a gateway, as its
// Observer reports them, and sends each change to the page's event
// streams. The zero Feed is not usable: make one with New. It is safe
// for concurrent use.
type Feed struct {
	keep      int // requests
	keepBytes int // their views' size, as viewSize counts it
	loads     atomic.Pointer[func() []record.Load]

	closeOnce sync.Once
	closed    chan struct{} // closed by Close, to end the event streams

	// mu guards the fields below. The Observer's calls hold it briefly
	// and never wait while holding it: sends to clients do not block.
	mu      sync.Mutex
	list    []*entry          // the kept requests, oldest first
	bytes   int               // the sum of list's sizes
	live    map[string]*entry // list's requests not yet done, by ID
	queues  map[string][]*entry
	clients map[*client]struct{}
	states  []StateChange // the last MaxStates changes, oldest first
	dropped int64         // events not sent to a client whose buffer was full
}

// entry is one kept request.
type entry struct {
	view     Request
	current  *Attempt // the attempt in flight, or nil
	queued   bool     // in Feed.queues
	queue    string   // while queued: the upstream whose queue it is in
	key      string   // while queued: the gate key
	queuedAt time.Time
	ahead    int
	done     bool
	size     int // viewSize(view)

	// first holds the views of a request's first attempt, in flight
	// ([0]), ended ([1]) and at the request's end ([2], where an
	// answer's ending becomes final), which its views' Attempts then
	// share: most requests make one attempt, and need no array of their
	// own. Each is written once, before a view holds it, as used records.
	first [3]Attempt
	used  [3]bool
}

// New returns a Feed that keeps the most recent requests: at most keep of
// them, whose JSON is at most keepBytes long. 0 or less means
// DefaultKeep and DefaultKeepBytes. The newest request is kept even if it
// alone is larger, which a view's bounded fields make at most about
// 40 KiB.
func New(keep, keepBytes int) *Feed {
	if keep <= 0 {
		keep = DefaultKeep
	}
	if keepBytes <= 0 {
		keepBytes = DefaultKeepBytes
	}
	return &Feed{
		keep:      keep,
		keepBytes: keepBytes,
		closed:    make(chan struct{}),
		live:      map[string]*entry{},
		queues:    map[string][]*entry{},
		clients:   map[*client]struct{}{},
	}
}

// SetLoads gives the feed the gateway's Loads, for the slots panel's
// counts; it is separate from New because the gateway is made after the
// feed, with its Observer. Without it (or with nil) the panel counts what
// the feed has seen itself.
func (f *Feed) SetLoads(loads func() []record.Load) {
	if loads == nil {
		f.loads.Store(nil)
		return
	}
	f.loads.Store(&loads)
}

// Observer returns the record.Observer that feeds f. Its calls never
// block: a client that reads its events too slowly misses them, and is
// sent a fresh snapshot when it catches up.
func (f *Feed) Observer() record.Observer {
	return record.Observer{
		Queued:        f.queued,
		AttemptStart:  f.attemptStart,
		AttemptEnd:    f.attemptEnd,
		Done:          f.done,
		UpstreamState: f.upstreamState,
	}
}

// Seed adds recs, requests that ended before f began, oldest first: the
// journal's newest when a gateway starts on a journal that holds some,
// so that its page shows them at once, not nothing until the next
// request. Call it before the Observer's first call.
func (f *Feed) Seed(recs []record.Request) {
	for i := range recs {
		f.done(&recs[i])
	}
}

// Endpoints returns the handlers to serve under /outlast/, as
// gateway.Config's Endpoints: "" the page, "events" its event stream,
// "recent" a JSON Snapshot, and "timeline/" the page's script and style.
func (f *Feed) Endpoints() map[string]http.Handler {
	return map[string]http.Handler{
		"":          http.HandlerFunc(f.servePage),
		"events":    http.HandlerFunc(f.serveEvents),
		"recent":    http.HandlerFunc(f.serveRecent),
		"timeline/": http.HandlerFunc(serveAsset),
	}
}

// Close ends the event streams being served, and answers later ones with
// 503, so that a server's graceful shutdown need not wait for them. The
// feed still keeps requests.
func (f *Feed) Close() {
	f.closeOnce.Do(func() { close(f.closed) })
}

// Snapshot returns the kept requests, the upstreams' slots and the last
// changes of their states.
func (f *Feed) Snapshot() Snapshot {
	return f.newest(f.keep)
}

// newest returns a Snapshot of the newest n of the kept requests, which
// counts the others in Elided.
func (f *Feed) newest(n int) Snapshot {
	ups := f.upstreams()
	f.mu.Lock()
	s := f.snapshotLocked(n)
	f.mu.Unlock()
	s.Upstreams = ups
	return s
}

// snapshotLocked is newest's snapshot, but for the upstreams, which it
// takes under mu.
func (f *Feed) snapshotLocked(n int) Snapshot {
	from := max(0, len(f.list)-n)
	s := Snapshot{
		Now: millis(time.Now()), Keep: f.keep, KeepBytes: f.keepBytes, Dropped: f.dropped,
		Requests: make([]Request, len(f.list)-from), Elided: from, States: slices.Clone(f.states),
	}
	if s.States == nil {
		s.States = []StateChange{} // the page reads a list, never null
	}
	for i, e := range f.list[from:] {
		// The views' slices are never changed once made: sharing them
		// is safe.
		s.Requests[i] = e.view
	}
	return s
}

func (f *Feed) queued(r *record.Request, key string, ahead int) {
	now, ended := time.Now(), attemptsOf(r)
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.entry(r)
	// The queue is the one of the upstream the request is at: a
	// fallback's, once it has moved.
	if up := r.Answered(); !e.queued || e.queue != up {
		f.dequeue(e)
		e.queued, e.queue = true, up
		f.queues[up] = append(f.queues[up], e)
	}
	e.key, e.queuedAt, e.ahead = key, now, ahead
	f.update(eventQueued, e, r, ended)
}

func (f *Feed) attemptStart(r *record.Request, a record.Attempt) {
	cur := inFlight(a)
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.entry(r)
	f.dequeue(e)
	var all []Attempt
	if len(r.Attempts) == 0 {
		all = e.keepFirst(0, cur)
	} else {
		// The attempt in flight goes in the room attemptsOf leaves, where
		// the view's own copy of it will be: one allocation for both.
		all = append(attemptsOf(r), cur)
	}
	e.current = &all[len(all)-1]
	f.update(eventAttemptStart, e, r, all[:len(all)-1])
}

func (f *Feed) attemptEnd(r *record.Request, _ record.Attempt) {
	// The gateway has added the attempt to r.Attempts already.
	first := len(r.Attempts) == 1
	var v Attempt
	var ended []Attempt
	if first {
		v = attemptOf(r, 0)
	} else {
		ended = attemptsOf(r)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.entry(r)
	e.current = nil
	if first {
		ended = e.keepFirst(1, v)
	}
	f.update(eventAttemptEnd, e, r, ended)
}

// keepFirst returns v as the attempts of a view: in first[i] if that has
// not been written yet, else in an array of its own, so that each of
// first is written once, before a view shares it.
func (e *entry) keepFirst(i int, v Attempt) []Attempt {
	if e.used[i] {
		return []Attempt{v}
	}
	e.first[i], e.used[i] = v, true
	return e.first[i : i+1 : i+1]
}

func (f *Feed) done(r *record.Request) {
	// The request's end may change how its answer ended ("200,
	// answering" becomes "200" or "200, broke after 12 bytes"), so the
	// views are made again, and the old ones kept where they are the same.
	one := len(r.Attempts) == 1
	var v Attempt
	if one {
		v = attemptOf(r, 0)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.entry(r)
	ended := e.view.Attempts
	switch {
	case one:
		if e.current != nil || len(ended) != 1 || ended[0] != v {
			ended = e.keepFirst(2, v)
		}
	case e.current != nil || len(ended) == 0 || !sameAttempts(ended, r):
		ended = attemptsOf(r)
	}
	f.dequeue(e)
	e.current, e.done = nil, true
	delete(f.live, r.ID) // it changes no more
	f.update(eventDone, e, r, ended)
}

// upstreamState keeps c, dropping the oldest change past MaxStates, and
// tells the clients.
func (f *Feed) upstreamState(c record.StateChange) {
	v := stateOf(c)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.states) == MaxStates {
		// Shift rather than reslice, so that the array never grows past
		// MaxStates; snapshots hold copies.
		copy(f.states, f.states[1:])
		f.states = f.states[:MaxStates-1]
	}
	f.states = append(f.states, v)
	f.publish(event{name: eventState, state: v})
}

// attemptsOf returns the views of r's ended attempts that a Request view
// holds: the last MaxAttempts-1, which leaves room for one in flight.
func attemptsOf(r *record.Request) []Attempt {
	from := firstShown(r)
	v := make([]Attempt, len(r.Attempts)-from, len(r.Attempts)-from+1)
	for i := range v {
		v[i] = attemptOf(r, from+i)
	}
	return v
}

// firstShown is the index in r.Attempts of the first attempt that a view
// holds.
func firstShown(r *record.Request) int {
	return max(0, len(r.Attempts)-(MaxAttempts-1))
}

// sameAttempts reports whether v, a view's attempts, are attemptsOf(r):
// at done they are often the ones attemptEnd made (a failure's ending
// does not change at the end of its request, an answer's may), which the
// view then shares rather than copies.
func sameAttempts(v []Attempt, r *record.Request) bool {
	from := firstShown(r)
	if len(v) != len(r.Attempts)-from {
		return false
	}
	for i := range v {
		if v[i] != attemptOf(r, from+i) {
			return false
		}
	}
	return true
}

// entry returns r's entry, adding one as the newest if there is none. A
// request dropped while still in progress comes back as the newest at its
// next change. Only the requests in progress are looked up: the map stays
// as small as the requests in flight, however many are kept.
func (f *Feed) entry(r *record.Request) *entry {
	if e := f.live[r.ID]; e != nil {
		return e
	}
	e := &entry{}
	f.live[r.ID] = e
	f.list = append(f.list, e)
	return e
}

// trim drops the oldest requests while more than keep are kept or their
// size is over keepBytes, but never the last one.
func (f *Feed) trim() {
	for len(f.list) > 1 && (len(f.list) > f.keep || f.bytes > f.keepBytes) {
		old := f.list[0]
		f.list[0] = nil // let the array, which append reuses, forget it
		f.list = f.list[1:]
		f.bytes -= old.size
		if !old.done && f.live[old.view.ID] == old {
			delete(f.live, old.view.ID)
		}
		f.dequeue(old)
	}
}

// dequeue removes e from the queue it is in, if any.
func (f *Feed) dequeue(e *entry) {
	if !e.queued {
		return
	}
	e.queued = false
	q := slices.DeleteFunc(f.queues[e.queue], func(x *entry) bool { return x == e })
	if len(q) == 0 {
		delete(f.queues, e.queue)
		return
	}
	f.queues[e.queue] = q
}

// update remakes e's view from r and tells the clients. The view is made
// anew, never changed in place, since snapshots and events share it.
func (f *Feed) update(name string, e *entry, r *record.Request, ended []Attempt) {
	v := Request{
		ID:       r.ID,
		Run:      r.Run,
		Method:   r.Method,
		Path:     r.Path,
		Upstream: r.Upstream,
		Slot:     r.Slot,
		Model:    r.Model,
		Stream:   r.Stream,
		Start:    millis(r.Start),
		End:      millis(r.End),
		Status:   r.Status,
		Error:    r.Error,
		Outcome:  requestOutcome(r, e.done),
		Attempts: ended,
		Elided:   len(r.Attempts) - len(ended),
	}
	if e.current != nil {
		v.Attempts = append(v.Attempts, *e.current)
	}
	switch {
	case e.done:
		v.State = StateDone
	case e.current != nil:
		v.State = StateSending
	case e.queued:
		v.State, v.QueuedAt, v.Ahead = StateQueued, millis(e.queuedAt), e.ahead
	default:
		v.State = StateWaiting
	}
	e.view = v
	size := viewSize(&v)
	f.bytes += size - e.size
	e.size = size
	f.trim()
	if len(f.clients) > 0 { // the event, a copy of the view, only for an open page
		f.publish(event{name: name, req: v})
	}
}

// viewSize is at least the length of v as JSON: its fields' names and
// numbers take less than the fixed parts, and no string grows more than
// sixfold when escaped (\u003c for <).
func viewSize(v *Request) int {
	n := 400 + 6*(len(v.ID)+len(v.Run)+len(v.Method)+len(v.Path)+len(v.Upstream)+len(v.Slot)+len(v.Model)+len(v.State)+len(v.Outcome)+len(v.Error))
	for i := range v.Attempts {
		a := &v.Attempts[i]
		n += 390 + 6*(len(a.Key)+len(a.Outcome)+len(a.Ending)+len(a.Error))
	}
	return n
}

// upstreams returns the state of the slots: the counts from the
// gateway's Loads if the feed has them, else from what the feed has seen,
// and the queues from what the feed has seen.
func (f *Feed) upstreams() []Upstream {
	var loads []record.Load
	fn := f.loads.Load()
	if fn != nil {
		loads = (*fn)() // outside mu: it takes the gates' locks
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var ups []Upstream
	if fn != nil {
		for _, u := range loads {
			ups = append(ups, Upstream{Name: u.Upstream, Slots: u.Slots, InFlight: u.InFlight, Queued: u.Queued,
				Pool: u.Pool, Requests: limitOf(u.Requests), Tokens: limitOf(u.Tokens)})
		}
	} else {
		ups = f.seenUpstreams()
	}
	for i := range ups {
		ups[i].Queue = waiters(f.queues[ups[i].Name])
	}
	return ups
}

// seenUpstreams counts the kept requests' attempts in flight, by their
// upstream, and the waiters, by the queue they are in: a fallback's, for a
// request that has moved.
func (f *Feed) seenUpstreams() []Upstream {
	byName := map[string]*Upstream{}
	var ups []*Upstream
	upstream := func(name string) *Upstream {
		u := byName[name]
		if u == nil {
			u = &Upstream{Name: name}
			byName[name] = u
			ups = append(ups, u)
		}
		return u
	}
	for _, e := range f.list {
		u := upstream(e.view.Upstream)
		if e.current != nil {
			u.InFlight++
		}
	}
	for name, q := range f.queues {
		upstream(name).Queued = len(q)
	}
	slices.SortFunc(ups, func(a, b *Upstream) int { return cmp.Compare(a.Name, b.Name) })
	out := make([]Upstream, len(ups))
	for i, u := range ups {
		out[i] = *u
	}
	return out
}

// waiters lists q with each waiter's place among those for its key:
// each key is its own FIFO queue.
func waiters(q []*entry) []Waiter {
	ws := make([]Waiter, len(q))
	pos := map[string]int{}
	for i, e := range q {
		pos[e.key]++
		ws[i] = Waiter{ID: e.view.ID, Run: e.view.Run, Key: e.key, Position: pos[e.key], Ahead: e.ahead, Since: millis(e.queuedAt)}
	}
	return ws
}
