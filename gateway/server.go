package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outlast-llm/outlast/internal/apierr"
)

// Defaults for the zero values of ServerConfig.
const (
	DefaultGrace             = 30 * time.Second
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultKeepAliveTimeout  = 2 * time.Minute
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultMaxConns          = 1024
)

// finalWait bounds how long Serve waits, once the grace period has run
// out, for the requests it ended to write their final error.
const finalWait = 2 * time.Second

// ServerConfig says how Serve holds its connections. Its zero value gives
// every field its default. No write timeout is set, ever: a long stream
// is the normal case, and a write timeout would cut it.
type ServerConfig struct {
	// Grace is how long the requests in flight may finish once Serve's
	// context ends. Zero means DefaultGrace (30 s).
	Grace time.Duration

	// ReadHeaderTimeout bounds the time to read a request's line and
	// headers. Zero means DefaultReadHeaderTimeout (10 s).
	ReadHeaderTimeout time.Duration

	// KeepAliveTimeout bounds how long an idle connection waits for its
	// next request. Zero means DefaultKeepAliveTimeout (2 m).
	KeepAliveTimeout time.Duration

	// MaxHeaderBytes bounds a request's line and headers, in bytes; a
	// larger head gets 431. Zero means DefaultMaxHeaderBytes (64 KiB).
	MaxHeaderBytes int

	// MaxConns bounds the connections open at once. A connection past it
	// gets a 503 (Outlast-Error: busy) and is closed. Zero means
	// DefaultMaxConns (1,024); a negative value means no bound.
	MaxConns int
}

func (c ServerConfig) withDefaults() ServerConfig {
	if c.Grace <= 0 {
		c.Grace = DefaultGrace
	}
	if c.ReadHeaderTimeout <= 0 {
		c.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if c.KeepAliveTimeout <= 0 {
		c.KeepAliveTimeout = DefaultKeepAliveTimeout
	}
	if c.MaxHeaderBytes <= 0 {
		c.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	return c
}

// Serve serves g on l until ctx ends, and then shuts down:
//   - it stops accepting connections, and answers a request that arrives
//     on an open one with 503 (Outlast-Error: shutdown);
//   - a request waiting between attempts stops waiting at once, and gets
//     503 shutdown with its last attempt's failure;
//   - the requests in flight may finish for up to cfg.Grace;
//   - then each that has not ends with one final, well-formed error: 503
//     shutdown if nothing of the answer was sent, an error event for a
//     stream, and for another body already begun a cut connection, which
//     a client cannot take for a whole answer.
//
// The record calls each of these shutdown, never the caller's 499. Serve
// returns nil after such a drain; it returns an error only if serving
// fails.
func Serve(ctx context.Context, l net.Listener, g *Gateway, cfg ServerConfig) error {
	cfg = cfg.withDefaults()
	conns := &connLimit{Listener: l, max: cfg.MaxConns}
	g.conns.Store(conns)
	srv := &http.Server{
		Handler:           g,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		// net/http sets the connection's read deadline after a request's
		// headers, to none without a ReadTimeout: with BodyTimeout, it
		// bounds the wait for the body's first bytes in the same call, and
		// the handler sets a deadline only for the reads after (see
		// slowBodyReader).
		ReadTimeout:    max(g.cfg.BodyTimeout, 0),
		IdleTimeout:    cfg.KeepAliveTimeout,
		MaxHeaderBytes: cfg.MaxHeaderBytes,
		// Requests outlive ctx during the drain; they end with the server.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(conns) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	g.live.drain()
	drain, cancel := context.WithTimeout(context.Background(), cfg.Grace)
	defer cancel()
	if err := srv.Shutdown(drain); err != nil {
		// The grace period ran out: end the requests still in flight,
		// each with its final error, and then what is left.
		g.live.abort()
		// Shutdown again waits for each handler to return and its
		// response to be flushed, not just for its exchange to end: the
		// error it wrote last must reach the caller before the
		// connection closes.
		final, cancel := context.WithTimeout(context.Background(), finalWait)
		srv.Shutdown(final)
		cancel()
		srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// connLimit is a listener that keeps at most max connections open,
// answering those past it with a 503 and closing them.
type connLimit struct {
	net.Listener
	max  int          // negative: no bound
	open atomic.Int64 // connections accepted and not yet closed

	refusing atomic.Int64 // 503s being written now
}

// maxRefusing bounds the 503s written at once; past it, a connection over
// the limit is closed without one, so that a flood cannot grow the
// gateway.
const maxRefusing = 64

func (c *connLimit) Accept() (net.Conn, error) {
	for {
		conn, err := c.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if n := c.open.Add(1); c.max >= 0 && n > int64(c.max) {
			c.open.Add(-1)
			c.refuse(conn)
			continue
		}
		return &countedConn{Conn: conn, open: &c.open}, nil
	}
}

// refuse answers a connection over the limit with a 503 and closes it,
// without holding up the accept loop.
func (c *connLimit) refuse(conn net.Conn) {
	if c.refusing.Add(1) > maxRefusing {
		c.refusing.Add(-1)
		conn.Close()
		return
	}
	go func() {
		defer c.refusing.Add(-1)
		defer conn.Close()
		body := apierr.Body(apierr.Busy, fmt.Sprintf("outlast: the gateway has %d connections open, its most (--max-conns): try again", c.max), nil)
		conn.SetWriteDeadline(time.Now().Add(time.Second))
		fmt.Fprintf(conn, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n%s: %s\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
			apierr.Header, apierr.Busy, len(body), body)
	}()
}

// countedConn is an accepted connection that counts itself out of the
// open ones when it closes.
type countedConn struct {
	net.Conn
	open *atomic.Int64
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}
