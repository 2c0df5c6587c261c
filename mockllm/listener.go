package mockllm

import (
	"net"
	"net/http"
	"sync"
)

// listener is a net.Listener that can be closed and reopened on the same
// address while one http.Server keeps serving it: Accept waits while it is
// closed. While it is closed, connections are refused by the kernel,
// which is what a client sees of a server that is restarting.
//
// It also tracks the server's connections, so that a refuse step can
// close those that are idle, as a restart would; otherwise a client would
// reuse a kept-alive connection and never see the refusal.
type listener struct {
	addr net.Addr

	mu       sync.Mutex // guards the fields below
	l        net.Listener
	wake     chan struct{} // closed when l is reopened or the listener closed
	closed   bool
	refusing bool
	conns    map[net.Conn]http.ConnState
}

func listen(addr string) (*listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &listener{addr: l.Addr(), l: l, wake: make(chan struct{}), conns: map[net.Conn]http.ConnState{}}, nil
}

func (ln *listener) Addr() net.Addr { return ln.addr }

func (ln *listener) Accept() (net.Conn, error) {
	for {
		ln.mu.Lock()
		l, wake, closed := ln.l, ln.wake, ln.closed
		ln.mu.Unlock()
		if closed {
			return nil, net.ErrClosed
		}
		if l == nil {
			<-wake
			continue
		}
		c, err := l.Accept()
		if err == nil {
			return c, nil
		}
		ln.mu.Lock()
		ours := ln.l != l // we closed it, to refuse or to reopen
		ln.mu.Unlock()
		if !ours {
			return nil, err
		}
	}
}

// Close closes the listener for good.
func (ln *listener) Close() error {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.closed {
		return nil
	}
	ln.closed = true
	close(ln.wake)
	if ln.l == nil {
		return nil
	}
	err := ln.l.Close()
	ln.l = nil
	return err
}

// setRefusing closes the socket (on) or reopens it on the same address
// (off).
func (ln *listener) setRefusing(on bool) error {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.closed {
		return nil
	}
	if !on {
		// SO_REUSEADDR, which Go sets, lets the port be bound again while
		// the connections of before are in TIME_WAIT.
		l, err := net.Listen("tcp", ln.addr.String())
		if err != nil {
			return err
		}
		ln.l, ln.refusing = l, false
		close(ln.wake)
		ln.wake = make(chan struct{})
		return nil
	}
	if ln.l != nil {
		ln.l.Close()
		ln.l = nil
	}
	ln.refusing = true
	for c, state := range ln.conns {
		if state == http.StateIdle || state == http.StateNew {
			c.Close()
		}
	}
	return nil
}

// connState is the http.Server's ConnState hook: it tracks connections,
// and closes one that goes idle while the server is refusing.
func (ln *listener) connState(c net.Conn, state http.ConnState) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	switch state {
	case http.StateHijacked, http.StateClosed:
		delete(ln.conns, c)
		return
	}
	ln.conns[c] = state
	if state == http.StateIdle && ln.refusing {
		c.Close()
	}
}

// isRefusing reports whether the socket is closed for a refuse step.
func (ln *listener) isRefusing() bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.refusing
}
