package redisgate

import "context"

// Forsake acquires key as Acquire does, for a process that dies at once
// after: nothing renews its lease or its heartbeat, and nothing releases
// it. It reports whether it got a slot rather than a place in the queue.
func Forsake(ctx context.Context, g *Gate, key string) (held bool, err error) {
	k, id := g.keys(key), g.member()
	state, _, err := g.run(ctx, acquireScript, k, id, g.capArg, g.maxQueueArg, g.leaseArg, g.ttlArg, g.wakeArg)
	switch {
	case err != nil:
		return false, err
	case state == stateGone:
		return false, ErrBusy
	}
	return state == stateHeld, nil
}

// RedisKeys returns the Redis keys of key that every acquire touches: its
// tickets, holders, queue and heartbeats (not the lower capacity that a
// Fleet may set).
func RedisKeys(g *Gate, key string) [4]string {
	k := g.keys(key)
	return [4]string(k.redis[:4])
}

// HoldTeller takes the lock under which a Fleet writes what it was told,
// as its teller does while it writes another key, until the returned func.
func HoldTeller(f *Fleet) (unlock func()) {
	f.tellMu.Lock()
	return f.tellMu.Unlock
}

// ProbeEndPending reports whether the end of a probe of key waits to be
// written.
func ProbeEndPending(f *Fleet, key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pending[key].owner != ""
}
