package redisgate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults for the zero fields of [Options].
const (
	DefaultLease   = 15 * time.Second
	DefaultTimeout = time.Second
	DefaultPrefix  = "outlast:gate:"
)

// Options are the bounds of a [Gate] and how it uses Redis. Every Gate that
// shares a Redis and a Prefix must be given the same Capacity, MaxQueue and
// Lease: each operation applies the bounds of the Gate that runs it.
type Options struct {
	// Capacity is how many requests per key may hold a slot at once,
	// across every Gate that shares the Redis and the Prefix. Values below
	// 1 mean 1.
	Capacity int

	// MaxQueue is how many more requests per key may wait for a slot.
	// Zero and negative values mean nobody may wait.
	MaxQueue int

	// Lease is how long a slot or a place in the queue outlives the last
	// sign of life from its process. A live holder renews its lease, and a
	// live waiter its heartbeat, every Lease/3; one that has died is
	// reaped once its lease runs out. Zero means DefaultLease (15 s).
	// Values below 30 ms mean 30 ms.
	Lease time.Duration

	// Timeout bounds every call to Redis, through the context it is given.
	// Zero and negative values mean DefaultTimeout (1 s). go-redis applies a context's
	// deadline to reads and writes on the connection only when the
	// client's ContextTimeoutEnabled is set; without it, its ReadTimeout
	// and WriteTimeout bound them instead.
	Timeout time.Duration

	// Prefix begins the name of every Redis key and channel that the Gate
	// uses. Empty means DefaultPrefix. It must not contain '{' or '}',
	// which would change the keys' hash tag.
	Prefix string
}

// Gate admits a bounded number of requests per key at a time and lets a
// bounded number more wait, served strictly in arrival order, like package
// gate's Gate, across every process whose Gate shares the Redis and the
// Prefix. See the package documentation for how.
//
// Use [New] to make one; the zero value has no client and is not usable.
// A Gate is safe for concurrent use. Call Close when done with it.
type Gate struct {
	client   redis.UniversalClient
	capacity int
	maxQueue int
	lease    time.Duration
	timeout  time.Duration
	prefix   string

	// The scripts' constant arguments, formatted once.
	capArg, maxQueueArg, leaseArg, ttlArg, wakeArg string

	owner string        // this Gate's name: the first part of its members' names
	seq   atomic.Uint64 // numbers this Gate's members

	wake *wakeups
}

// New returns a Gate that keeps its state in Redis through client, which
// must not be nil. It sends nothing to Redis until it is used.
func New(client redis.UniversalClient, opts Options) *Gate {
	g := &Gate{
		client:   client,
		capacity: max(opts.Capacity, 1),
		maxQueue: max(opts.MaxQueue, 0),
		lease:    opts.Lease,
		timeout:  opts.Timeout,
		prefix:   opts.Prefix,
		owner:    newOwner(),
	}
	if g.lease == 0 {
		g.lease = DefaultLease
	}
	// A lease is renewed every third of it, and Redis measures it in ms.
	g.lease = max(g.lease, 30*time.Millisecond)
	if g.timeout <= 0 {
		g.timeout = DefaultTimeout
	}
	if g.prefix == "" {
		g.prefix = DefaultPrefix
	}
	g.capArg = strconv.Itoa(g.capacity)
	g.maxQueueArg = strconv.Itoa(g.maxQueue)
	g.leaseArg = strconv.FormatInt(g.lease.Milliseconds(), 10)
	// Idle structures lapse after three leases: every live holder and
	// waiter touches them at least every third of one.
	g.ttlArg = strconv.FormatInt(3*g.lease.Milliseconds(), 10)
	g.wakeArg = g.prefix + "wake:"
	g.wake = newWakeups(client, g.wakeArg+g.owner, g.lease/3, g.timeout)
	return g
}

// newOwner returns a name for a Gate, random so that Gates in different
// processes do not share one.
func newOwner() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// member returns a new name for one Acquire, unique to this Gate: the
// owner's name, ':', and a number. The scripts read the owner from it.
func (g *Gate) member() string {
	return g.owner + ":" + strconv.FormatUint(g.seq.Add(1), 36)
}

// Acquire takes one of key's slots, waiting for one if need be, and returns
// a func that gives it back. It follows the rules of package gate's
// Acquire, across every Gate that shares the Redis and the Prefix.
//
// A key with a free slot and nobody waiting is taken at once, in one round
// trip to Redis. If MaxQueue requests already wait for key, Acquire
// returns [ErrBusy] at once. Otherwise it joins the back of key's queue,
// calls queued (if not nil) once with the number of requests ahead of it,
// holders and earlier waiters, and blocks until a release hands it the slot
// or ctx is done. queued runs in the caller's goroutine, and may be called
// after the slot has already been granted.
//
// If ctx is done, Acquire returns ctx.Err() and leaves the queue; a slot
// granted at the same time is passed on. If Redis fails, it returns an
// error that matches [ErrUnavailable]. On any error, release is nil.
//
// While the slot is held, a goroutine renews its lease every Lease/3.
// release stops it and gives the slot back in one round trip; it may be
// called from any goroutine and more than once, and only the first call
// does anything. It returns within about twice Options.Timeout even if
// Redis does not answer; a slot that could not be given back is reaped
// when its lease runs out.
func (g *Gate) Acquire(ctx context.Context, key string, queued func(ahead int)) (release func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if g.wake.isClosed() {
		return nil, ErrClosed
	}
	k, id := g.keys(key), g.member()
	// Watch for the grant before asking: it may be published before the
	// reply to this call arrives.
	w := g.wake.watch(id)
	defer g.wake.unwatch(id)
	state, ahead, err := g.run(ctx, acquireScript, k, id, g.capArg, g.maxQueueArg, g.leaseArg, g.ttlArg, g.wakeArg)
	switch {
	case err != nil:
		if ctx.Err() != nil {
			g.leave(k, id) // the script may have run
		}
		return nil, g.fail(ctx, "acquire", key, err)
	case state == stateHeld:
		return g.hold(k, id), nil
	case state == stateGone: // refused: the queue is full
		return nil, ErrBusy
	}
	g.wake.start()
	if queued != nil {
		g.notify(k, id, queued, ahead)
	}
	return g.wait(ctx, k, id, w)
}

// notify calls queued. If queued panics, the waiter leaves the queue before
// the panic unwinds Acquire's caller, or its slot would be granted to
// nobody until its heartbeat lapsed.
func (g *Gate) notify(k keys, id string, queued func(int), ahead int) {
	done := false
	defer func() {
		if !done {
			g.leave(k, id)
		}
	}()
	queued(ahead)
	done = true
}

// Load returns how many requests hold one of key's slots and how many wait
// for one, across every Gate that shares the Redis and the Prefix, after
// reaping those whose lease has run out and granting the slots that frees.
// An idle key reports 0, 0. If Redis fails, the error matches
// [ErrUnavailable].
func (g *Gate) Load(ctx context.Context, key string) (inFlight, waiting int, err error) {
	inFlight, waiting, err = g.run(ctx, loadScript, g.keys(key), g.capArg, g.leaseArg, g.ttlArg, g.wakeArg)
	if err != nil {
		return 0, 0, g.fail(ctx, "load", key, err)
	}
	return inFlight, waiting, nil
}

// Close stops the subscription that wakes this Gate's waiters, and makes
// every Acquire waiting in it, and every later one, return [ErrClosed].
// Slots already held stay held, and renewed, until released. Close the
// Gate before the client.
func (g *Gate) Close() error {
	g.wake.close()
	return nil
}

// run runs script s on k's keys, under ctx bounded by the Timeout, and
// returns the two integers of its reply. go-redis sends it by its SHA, and
// by its text only if Redis does not know the SHA yet (after a restart, or
// SCRIPT FLUSH), which also loads it for the next time.
func (g *Gate) run(ctx context.Context, s *redis.Script, k keys, args ...any) (a, b int, err error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	v, err := s.Run(ctx, g.client, k.redis[:], args...).Int64Slice()
	if err == nil && len(v) != 2 {
		err = errReply
	}
	if err != nil {
		return 0, 0, err
	}
	return int(v[0]), int(v[1]), nil
}

// setCap lowers key's capacity to c for every Gate that shares it, until
// it is set again or a ttl passes; 0 removes the lower capacity.
func (g *Gate) setCap(ctx context.Context, key string, c int) error {
	_, _, err := g.run(ctx, capScript, g.keys(key), strconv.Itoa(c), g.capArg, g.leaseArg, g.ttlArg, g.wakeArg)
	if err != nil {
		return g.fail(ctx, "limit", key, err)
	}
	return nil
}

// leave ends id's hold or wait, under a context of its own: it runs when
// the caller's context has ended, or has none. An error is dropped: the
// hold or wait then lapses when its lease runs out.
func (g *Gate) leave(k keys, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	_ = leaveScript.Run(ctx, g.client, k.redis[:], id, g.capArg, g.leaseArg, g.ttlArg, g.wakeArg).Err()
}

// renew extends id's lease or heartbeat and reports what it has.
func (g *Gate) renew(ctx context.Context, k keys, id string) (state, ahead int, err error) {
	return g.run(ctx, renewScript, k, id, g.capArg, g.leaseArg, g.ttlArg, g.wakeArg)
}
