package redisgate

import (
	"context"
	"time"
)

// wait blocks, in the caller's goroutine, until member id of k is granted a
// slot, ctx is done, the Gate is closed, or Redis fails. A grant is seen at
// once through its published message; the heartbeat every Lease/3, which
// keeps the place alive, also asks Redis whether a grant was missed.
func (g *Gate) wait(ctx context.Context, k keys, id string, w *wakeup) (func(), error) {
	every := g.lease / 3
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-w.granted:
			return g.granted(ctx, k, id)
		case <-ctx.Done():
			g.leave(k, id) // passes on a slot granted meanwhile
			return nil, ctx.Err()
		case <-g.wake.stop:
			g.leave(k, id)
			return nil, ErrClosed
		case <-w.check:
		case <-t.C:
		}
		state, _, err := g.renew(ctx, k, id)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				g.leave(k, id)
			}
			// Otherwise Redis is failing, and so would a leave: the place
			// lapses a lease after its last heartbeat.
			return nil, g.fail(ctx, "acquire", k.key, err)
		case state == stateHeld:
			return g.granted(ctx, k, id)
		case state == stateGone:
			return nil, g.fail(ctx, "acquire", k.key, errPlaceLost)
		}
		t.Reset(every)
	}
}

// granted returns the release func of id's slot, just granted, unless ctx
// ended too: then, as for a done ctx on entry, it gives the slot on, so
// that a caller that gave up sends nothing.
func (g *Gate) granted(ctx context.Context, k keys, id string) (func(), error) {
	if err := ctx.Err(); err != nil {
		g.leave(k, id)
		return nil, err
	}
	return g.hold(k, id), nil
}
