// Package redisgate shares a gate through Redis: the bound on the requests
// in flight per key, and the bounded queue in front of it, that package
// gate keeps in one process, kept for every process whose [Gate] uses the
// same Redis and the same [Options.Prefix]. Its rules are package gate's:
// Capacity holders per key, at most MaxQueue waiters, refused with
// [ErrBusy] beyond that, served strictly in arrival order, queued called
// once with the number ahead, cancellation that leaves the queue and passes
// on a slot granted meanwhile, and a release that is idempotent. One suite
// of tests (internal/gatetest) holds both packages to them. It needs Redis
// 7.0 or later, standalone, replicated or Cluster.
//
// # Data layout
//
// A gate key K has up to five Redis keys under the prefix P, which share
// the hash tag {K} and so one Cluster slot:
//
//	P{K}:h  ZSET  the holders: member → lease expiry, in ms on Redis's clock
//	P{K}:q  ZSET  the waiters: member → ticket, their arrival order
//	P{K}:e  ZSET  the waiters: member → heartbeat expiry, in ms
//	P{K}:t  STRING the ticket counter, which INCR advances for each waiter
//	P{K}:c  STRING a capacity lower than Options.Capacity, while a [Fleet]
//	               holds a recovering upstream to its limit (capScript)
//
// A member names one Acquire: its Gate's owner name (16 random hex digits,
// one per Gate) and a number, as in "3f9c0a1b2c3d4e5f:1k". A Gate's
// waiters are woken through the channel P + "wake:" + owner. Every
// operation sets the first four keys to expire three leases after it (the
// lower capacity expires as the Fleet set it), and a ZSET
// that empties is deleted, so that a key nobody uses any more leaves
// nothing behind. The empty key is kept as K = "bound" (so "" and "bound"
// are one key): an empty hash tag, {}, is none. In a Cluster, a key K must
// not begin with '}', which would leave the hash tag empty.
//
// # Scripts
//
// Each operation is one Lua script, atomic in Redis, sent by its SHA with
// EVALSHA; go-redis falls back to EVAL, which also caches the script, when
// Redis does not know the SHA (after a restart or SCRIPT FLUSH). Every
// script first reads the clock with TIME, so that all processes measure
// leases on Redis's one clock and never on their own; then it reaps the
// holders and waiters whose lease or heartbeat has run out, and grants the
// free slots to the queue's head, in ticket order, before it decides
// anything. acquire takes a free slot if nobody waits, or queues the member
// with the next ticket if there is room, or refuses. leave ends a hold or
// a wait, whichever the member has: it is both release and cancellation,
// so a grant that raced a cancellation is passed on, not lost. renew
// extends a holder's lease or a waiter's heartbeat, and tells a waiter
// whether it has been granted. load reports the holders and waiters. cap
// sets or removes the lower capacity and grants what a higher one frees.
//
// The scripts are idempotent per member: go-redis sends a command again
// when a connection breaks before the reply, and a member already holding
// or queued keeps the one place it has.
//
// # Leases and heartbeats
//
// A held slot is a lease that lasts [Options.Lease] (15 s by default). A
// goroutine renews it every Lease/3 while the slot is held, and release
// stops it. A waiter's place has an expiry too, which its Acquire renews
// at the same pace while it waits: its heartbeat. A holder or a waiter
// whose process dies (SIGKILL, a network partition) stops renewing, and
// the next script to run on the key after its lease has run out reaps it,
// so that a dead holder frees its slot, and a dead waiter never holds up
// the queue, for longer than a lease. While anyone waits, their heartbeats
// run those scripts at least every Lease/3. A grant gives a full lease
// from its moment, so that the waiter has the time to see it.
//
// # Wake-ups
//
// A release wakes the next waiter at once, by no polling: the script that
// frees the slot grants it to the head waiter and PUBLISHes the member on
// its Gate's channel. Each Gate subscribes to its own channel, from the
// first time one of its Acquires has to wait until Close, and hands each
// message to the Acquire waiting for it, which blocks on a Go channel.
//
// Pub/sub rather than a per-waiter list that the waiter BLPOPs: a blocked
// BLPOP holds one of the client's pool connections for each waiter, so
// that enough waiters exhaust the pool and hold up the very releases that
// would wake them, and a go-redis command cannot be interrupted by its
// context's cancellation, only by its deadline, so a cancelled waiter
// would stay blocked for the rest of its BLPOP. A subscription is one
// connection per Gate for all its waiters, from go-redis's pub/sub
// connections rather than its pool, and a waiter's context ends its wait
// at once.
//
// Pub/sub delivers at most once: a message published while the
// subscription is down is lost, for Redis does not keep it. That costs
// time, never a slot. The slot was granted in Redis, where it is the
// waiter's; the waiter learns of it at the latest by its next heartbeat,
// which asks Redis, so within Lease/3; and when the subscription is made
// or made again, every waiting Acquire of the Gate asks Redis at once. A
// subscription that goes quiet for Lease/3 is pinged, and one that does not
// answer within another Lease/3 is replaced.
//
// # Cost
//
// An Acquire that finds a free slot costs one round trip, the acquire
// script, and its release one more, the leave script. A held slot costs a
// renewal every Lease/3. A waiter costs one round trip to queue and one
// per heartbeat, and none for its grant, which is published to it. Every
// Gate that has had a waiter keeps one subscribed connection, pinged when
// it is quiet.
//
// # Failure
//
// Every call to Redis is bounded by [Options.Timeout] (1 s by default),
// through its context; a waiter waits on its Go channel for as long as its
// own context allows, and a release for its call and, at worst, the
// renewal already on its way. When
// Redis fails, Acquire and Load return an error that matches
// [ErrUnavailable], wraps the cause and names the operation and key, such
// as `redisgate: acquire "llama:8080": dial tcp 127.0.0.1:6379: connect:
// connection refused`, so that a caller can fall back to an in-process
// gate. A waiter whose heartbeat fails returns such an error too; so does
// one whose place Redis reaped because its heartbeats stopped arriving. A
// release that cannot reach Redis returns after the Timeout, and its slot
// lapses when the lease runs out, as does the place of a waiter that gave
// up while Redis was unreachable: leases make every failure heal by
// itself.
//
// What Redis forgets, the gate forgets: a restart without persistence, or
// a failover that loses the last writes, loses holds and places with them.
// Holders learn of it at their next renewal and stop renewing, but their
// requests go on, so the key may briefly admit more than Capacity; waiters
// learn of it at their next heartbeat, and return an unavailable error.
//
// go-redis applies a context's deadline to the connection's reads and
// writes only if the client's ContextTimeoutEnabled is set; set it, or the
// client's ReadTimeout and WriteTimeout bound a call whose Redis has gone
// silent instead of the Timeout. The subscription's handshake, and so
// Close when Redis is silent, is bounded by ReadTimeout either way.
//
// # Goroutines
//
// Unlike package gate, this package starts goroutines: one per held slot,
// which renews its lease and ends at release, and one per Gate that has had
// a waiter, which keeps the subscription and ends at Close. A waiting
// Acquire blocks in its caller's goroutine.
package redisgate
