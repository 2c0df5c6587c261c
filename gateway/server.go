package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// DefaultGrace is how long Serve lets in-flight requests finish after its
// context ends.
const DefaultGrace = 30 * time.Second

// Serve serves h on l until ctx ends. Then it stops accepting connections,
// lets the requests in flight finish for up to grace (zero means
// DefaultGrace), closes what is left, and returns nil: a drain is a normal
// end. It returns an error only if serving fails.
func Serve(ctx context.Context, l net.Listener, h http.Handler, grace time.Duration) error {
	if grace <= 0 {
		grace = DefaultGrace
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		// Requests outlive ctx during the drain; they end with the server.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	drain, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(drain); err != nil {
		// The grace period ran out: end the requests still in flight.
		srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
