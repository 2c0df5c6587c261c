package gateway

import (
	"errors"
	"sync"
)

// errShutdown is the cause that ends the attempts of a request the gateway
// stops serving because it is shutting down.
var errShutdown = errors.New("outlast: the gateway is shutting down")

// liveSet holds the exchanges in flight, for Serve's shutdown: drain ends
// their waits between attempts, abort ends them all. Its zero value is an
// empty set, serving.
type liveSet struct {
	mu       sync.Mutex // guards the fields below
	all      map[*exchange]struct{}
	draining bool // no new exchange; no wait between attempts
	aborted  bool // every exchange ends now
}

// add adds x, and reports false when the gateway is shutting down and x
// must not start.
func (l *liveSet) add(x *exchange) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.draining {
		return false
	}
	if l.all == nil {
		l.all = map[*exchange]struct{}{}
	}
	l.all[x] = struct{}{}
	return true
}

func (l *liveSet) remove(x *exchange) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.all, x)
}

// shuttingDown reports whether drain has been called: a request that
// comes to wait between attempts stops at once.
func (l *liveSet) shuttingDown() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.draining
}

// isAborted reports whether abort has been called.
func (l *liveSet) isAborted() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.aborted
}

// drain refuses new exchanges, and ends each wait between attempts now:
// the attempts in flight go on.
func (l *liveSet) drain() {
	l.mu.Lock()
	l.draining = true
	xs := l.list()
	l.mu.Unlock()
	for _, x := range xs {
		x.stopIfWaiting()
	}
}

// abort ends every exchange in flight: each writes its final error.
func (l *liveSet) abort() {
	l.mu.Lock()
	l.aborted = true
	xs := l.list()
	l.mu.Unlock()
	for _, x := range xs {
		x.stop()
	}
}

// list returns the exchanges; l.mu is held.
func (l *liveSet) list() []*exchange {
	xs := make([]*exchange, 0, len(l.all))
	for x := range l.all {
		xs = append(xs, x)
	}
	return xs
}
