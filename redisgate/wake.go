package redisgate

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// wakeups receives the grants published on a Gate's channel and hands each
// to the Acquire waiting for it. It holds one subscribed connection, from
// go-redis's pub/sub connections rather than its pool, for all of the
// Gate's waiters, started by the first that waits.
type wakeups struct {
	client  redis.UniversalClient
	channel string
	every   time.Duration // how long the subscription may stay silent before it is pinged
	timeout time.Duration // bounds a ping, and the pause before subscribing again

	stop chan struct{} // closed by close
	done chan struct{} // closed when run has returned, if it was started

	// mu guards the fields below.
	mu      sync.Mutex
	waiters map[string]*wakeup // by member
	started bool
	closed  bool
	ps      *redis.PubSub      // the current subscription, for close to end its read
	cancel  context.CancelFunc // ends run's dials, for close
}

// wakeup is one waiting Acquire's signals. Both have room for one value and
// are sent to without blocking: one signal pending is as good as several.
type wakeup struct {
	granted chan struct{} // its grant was published
	check   chan struct{} // a grant may have been missed: ask Redis
}

func newWakeups(client redis.UniversalClient, channel string, every, timeout time.Duration) *wakeups {
	return &wakeups{
		client:  client,
		channel: channel,
		every:   every,
		timeout: timeout,
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		waiters: make(map[string]*wakeup),
	}
}

// watch makes the grant of member id, once published, wake the returned
// wakeup. It is called before the member is sent to Redis, so that no grant
// published for it is missed.
func (w *wakeups) watch(id string) *wakeup {
	u := &wakeup{granted: make(chan struct{}, 1), check: make(chan struct{}, 1)}
	w.mu.Lock()
	w.waiters[id] = u
	w.mu.Unlock()
	return u
}

// unwatch forgets member id.
func (w *wakeups) unwatch(id string) {
	w.mu.Lock()
	delete(w.waiters, id)
	w.mu.Unlock()
}

// start subscribes, unless that is done already or w is closed. A waiter
// calls it only after its place is in Redis: the grants published before
// the subscription took hold are made up for by the check that every
// waiter is told to make when it does.
func (w *wakeups) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started || w.closed {
		return
	}
	w.started = true
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go w.run(ctx)
}

func (w *wakeups) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// close ends the subscription and waits for its goroutine to return.
func (w *wakeups) close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	started, ps, cancel := w.started, w.ps, w.cancel
	w.mu.Unlock()
	close(w.stop)
	if !started {
		return
	}
	cancel()
	if ps != nil {
		// Ends a read in progress. A handshake in progress, on a
		// connection that Redis does not answer, is bounded only by the
		// client's ReadTimeout, and holds the lock that Close takes.
		_ = ps.Close()
	}
	<-w.done
}

// run keeps a subscription to the channel until close, which cancels ctx:
// when one fails, it makes a new one after a pause.
func (w *wakeups) run(ctx context.Context) {
	defer close(w.done)
	for {
		sctx, cancel := context.WithTimeout(ctx, w.timeout)
		ps := w.client.Subscribe(sctx, w.channel)
		cancel()
		if !w.setSubscription(ps) {
			_ = ps.Close()
			return
		}
		w.receive(ctx, ps)
		_ = ps.Close()
		if !w.pause() {
			return
		}
	}
}

// pause waits for a Timeout before the next subscription, so that a Redis
// that is down is not dialled in a loop. It reports false if w is closed
// first.
func (w *wakeups) pause() bool {
	t := time.NewTimer(w.timeout)
	defer t.Stop()
	select {
	case <-w.stop:
		return false
	case <-t.C:
		return true
	}
}

// setSubscription makes ps the one close ends, unless w is closed already.
func (w *wakeups) setSubscription(ps *redis.PubSub) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.ps = ps
	return true
}

// receive hands out the grants that ps receives until it fails. A
// connection that has gone quiet is pinged, and one that stays quiet after
// the ping is given up, so that a connection that died without a word is
// noticed within two silences.
func (w *wakeups) receive(ctx context.Context, ps *redis.PubSub) {
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, w.every)
		if err != nil {
			if !isTimeout(err) || pinged {
				return
			}
			pctx, cancel := context.WithTimeout(ctx, w.timeout)
			err = ps.Ping(pctx)
			cancel()
			if err != nil {
				return
			}
			pinged = true
			continue
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Message:
			w.grant(m.Payload)
		case *redis.Subscription:
			// Subscribed anew: any grant published before now may have
			// gone to nobody.
			w.checkAll()
		}
	}
}

// isTimeout reports whether err is a read that timed out.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// grant wakes member id's Acquire, if it is still waiting.
func (w *wakeups) grant(id string) {
	w.mu.Lock()
	u := w.waiters[id]
	w.mu.Unlock()
	if u != nil {
		signal(u.granted)
	}
}

// checkAll tells every waiter to ask Redis whether it has been granted.
func (w *wakeups) checkAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, u := range w.waiters {
		signal(u.check)
	}
}

// signal sends on c without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
