package mockllm

import (
	"context"
	"errors"
)

// WaitListening returns when s's socket is open again after a refuse
// step, or when ctx is done. It lets the black-box tests wait for the
// reopening itself rather than poll for it.
func WaitListening(ctx context.Context, s *Server) error {
	ln := s.ln
	for {
		ln.mu.Lock()
		refusing, closed, wake := ln.refusing, ln.closed, ln.wake
		ln.mu.Unlock()
		switch {
		case closed:
			// wake stays closed after Close: waiting on it would spin.
			return errors.New("mockllm: server closed")
		case !refusing:
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
