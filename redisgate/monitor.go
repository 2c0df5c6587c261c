package redisgate

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outlast-llm/outlast"
)

// A Monitor tells whether Redis can be reached, for the [Fallback] gates
// and [Fleet]s that do without it when it cannot. The first failure of a
// call to Redis marks it degraded; from then on those skip Redis at once,
// with no call and no timeout per request, and the Monitor pings Redis
// every interval until it answers, when they use it again.
//
// A Monitor is safe for concurrent use. Its zero value is not usable: use
// [NewMonitor].
type Monitor struct {
	client   redis.UniversalClient
	every    time.Duration
	timeout  time.Duration
	onChange func(degraded bool, err error)

	mu       sync.Mutex
	degraded bool
	closed   bool
	stop     chan struct{}
	done     chan struct{} // closed when the pinger has returned; nil when none runs
}

// NewMonitor returns a Monitor of client that pings Redis every interval
// (1 s if zero), each ping bounded by timeout (DefaultTimeout if zero),
// while Redis is degraded. onChange, if not nil, is called when Redis is
// found degraded (true, with the failure) and when it answers again
// (false, nil), in a goroutine of the Monitor's or the caller's, never
// twice at once.
func NewMonitor(client redis.UniversalClient, every, timeout time.Duration, onChange func(degraded bool, err error)) *Monitor {
	if every <= 0 {
		every = time.Second
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Monitor{client: client, every: every, timeout: timeout, onChange: onChange, stop: make(chan struct{})}
}

// Degraded reports whether Redis is degraded: its last call failed and no
// ping has been answered since.
func (m *Monitor) Degraded() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.degraded
}

// Check pings Redis once, bounded by the Monitor's timeout, and marks it
// degraded if the ping fails, as a failed call would. A program calls it
// at start, so that a Redis that cannot be reached is said to be so before
// the first request needs it; it returns the ping's error.
func (m *Monitor) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	err := m.client.Ping(ctx).Err()
	if err != nil {
		m.fail(err)
	}
	return err
}

// fail marks Redis degraded after err, a failure to use it, and starts
// pinging it. It is a no-op once the Monitor is closed.
func (m *Monitor) fail(err error) {
	m.mu.Lock()
	if m.degraded || m.closed {
		m.mu.Unlock()
		return
	}
	m.degraded = true
	m.done = make(chan struct{})
	m.mu.Unlock()
	if m.onChange != nil {
		m.onChange(true, err)
	}
	go m.ping()
}

// ping pings Redis every interval until it answers or the Monitor is
// closed.
func (m *Monitor) ping() {
	defer close(m.done)
	t := time.NewTicker(m.every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
		err := m.client.Ping(ctx).Err()
		cancel()
		if err != nil {
			continue
		}
		// Told before the state clears: a failure that follows can
		// only be found, and told, after it, never at once with it.
		if m.onChange != nil {
			m.onChange(false, nil)
		}
		m.mu.Lock()
		m.degraded = false
		m.mu.Unlock()
		return
	}
}

// Close stops the pinger, if it runs, and waits for it.
func (m *Monitor) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.stop)
	done := m.done
	m.mu.Unlock()
	if done != nil {
		<-done
	}
	return nil
}

// Fallback is a Gate that uses shared while Redis can be reached and local,
// a gate of this process with the same bounds, while it cannot: a gateway
// replica keeps serving, alone, through an outage of Redis. While Redis is
// degraded, N processes that share it may send N times its capacity; a
// request already holding a slot of either keeps it until it releases it.
type Fallback struct {
	Shared  *Gate
	Local   outlast.Gate
	Monitor *Monitor
}

// Acquire takes a slot of the shared gate, or of the local one while
// Redis is degraded. A shared Acquire that fails because Redis could not
// be used marks it degraded and is tried on the local gate at once.
func (f *Fallback) Acquire(ctx context.Context, key string, queued func(ahead int)) (func(), error) {
	if queued != nil {
		// Once, as a Gate promises, even when a wait at the shared
		// gate fails over to the local one.
		called, q := false, queued
		queued = func(ahead int) {
			if !called {
				called = true
				q(ahead)
			}
		}
	}
	if !f.Monitor.Degraded() {
		release, err := f.Shared.Acquire(ctx, key, queued)
		if err == nil || !errors.Is(err, ErrUnavailable) {
			return release, err
		}
		f.Monitor.fail(err)
	}
	return f.Local.Acquire(ctx, key, queued)
}

// Load reports key's holders and waiters: across every process that
// shares the gate, or this process's own while Redis is degraded. A Load
// that fails marks Redis degraded, as an Acquire does.
func (f *Fallback) Load(ctx context.Context, key string, local func(string) (int, int)) (inFlight, waiting int) {
	if !f.Monitor.Degraded() {
		in, w, err := f.Shared.Load(ctx, key)
		if err == nil {
			return in, w
		}
		f.Monitor.fail(err)
	}
	return local(key)
}
