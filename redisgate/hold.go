package redisgate

import (
	"context"
	"sync/atomic"
	"time"
)

// hold is one held slot: its member, and the goroutine that renews its
// lease until release.
type hold struct {
	g        *Gate
	k        keys
	id       string
	released atomic.Bool
	stop     chan struct{} // closed by release
	done     chan struct{} // closed when renew has returned
}

// hold starts renewing id's lease and returns the release func of its slot.
func (g *Gate) hold(k keys, id string) func() {
	h := &hold{g: g, k: k, id: id, stop: make(chan struct{}), done: make(chan struct{})}
	go h.renew()
	return h.release
}

// renew extends the lease every Lease/3 until release, or until Redis says
// the lease was lost. A renewal that fails is tried again a third of a
// lease later, while two thirds of the lease are still left, at worst.
func (h *hold) renew() {
	defer close(h.done)
	every := h.g.lease / 3
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		state, _, err := h.g.renew(context.Background(), h.k, h.id)
		if err == nil && state != stateHeld {
			// Reaped: Redis went a lease without hearing from us, and the
			// slot may be another's now. Renewing cannot take it back.
			return
		}
		t.Reset(every)
	}
}

// release gives the slot back, once. The renewer is told to stop first, so
// that no renewal follows the release; a renewal already on its way finds
// the member gone and changes nothing. Waiting for the renewer to return
// takes at most one call's Timeout, and leaves no goroutine behind.
func (h *hold) release() {
	if !h.released.CompareAndSwap(false, true) {
		return
	}
	close(h.stop)
	h.g.leave(h.k, h.id)
	<-h.done
}
