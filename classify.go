package outlast

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
)

// IsRetryable reports whether a failure may succeed if the same request is
// sent again. It is the default [Policy.Retryable].
//
// It accepts:
//   - a *StatusError with status 408, 425, 429, 500, 502, 503, 504, 529, or
//     any other 5xx;
//   - a connection refused or reset, a failed dial, or a connection closed
//     before the response (io.EOF, io.ErrUnexpectedEOF);
//   - a timeout before the first response byte (a net.Error whose Timeout
//     is true, such as http.Transport's ResponseHeaderTimeout);
//   - ErrStalled and ErrClosedEarly.
//
// It refuses every other 4xx, the caller's own cancellation or deadline
// (context.Canceled, context.DeadlineExceeded), a busy gate (ErrBusy), an
// upstream that an Admission judged down for the request (ErrUpstreamDown), and
// anything it does not know. A response header "x-should-retry: true" or
// "false" overrides the status, as the OpenAI and Anthropic SDKs let the
// server decide.
func IsRetryable(err error) bool {
	if err == nil || isBusy(err) || isCallerDone(err) || errors.Is(err, ErrUpstreamDown) || errors.Is(err, ErrRetryBudget) {
		return false
	}
	var se *StatusError
	if errors.As(err, &se) {
		return statusRetryable(se)
	}
	return isGone(err) || isTimeout(err)
}

// ServerGone reports whether err means a local inference server went away
// and may be back: a failed connection, a response closed early or
// stalled, a timeout before the first byte (a model still loading), or a
// 503. It is the narrower predicate for llama.cpp and other servers on
// the same host, where any other status would fail again. Use it as
// [Policy.Retryable].
func ServerGone(err error) bool {
	if err == nil || isBusy(err) || isCallerDone(err) || errors.Is(err, ErrUpstreamDown) || errors.Is(err, ErrRetryBudget) {
		return false
	}
	var se *StatusError
	if errors.As(err, &se) {
		// Narrower than IsRetryable, never broader: a 503 that the server
		// marks x-should-retry: false is not retried either.
		return se.StatusCode == http.StatusServiceUnavailable && statusRetryable(se)
	}
	return isGone(err) || isTimeout(err)
}

// statusRetryable classifies a failed status.
func statusRetryable(se *StatusError) bool {
	// The OpenAI and Anthropic SDKs let the server decide with this header;
	// it overrides the status both ways.
	switch strings.ToLower(strings.TrimSpace(se.Header.Get("X-Should-Retry"))) {
	case "true":
		return true
	case "false":
		return false
	}
	switch c := se.StatusCode; {
	case c == http.StatusRequestTimeout, c == http.StatusTooEarly, c == http.StatusTooManyRequests:
		return true
	case c >= 500 && c <= 599: // 500, 502, 503, 504, 529 (Anthropic's overloaded) and the rest
		return true
	}
	return false
}

// isCallerDone reports whether err is a context's end: the caller's own
// cancellation or deadline, not the server's failure. It compares the
// chain's errors by identity rather than with errors.Is, because
// net/http's own timeouts (ResponseHeaderTimeout) say they are
// context.DeadlineExceeded through an Is method, and those are the server's.
func isCallerDone(err error) bool {
	// Depth first over both Unwrap forms; the bound is far beyond any real
	// chain and keeps a cyclic one from spinning.
	stack := []error{err}
	for n := 0; len(stack) > 0 && n < 64; n++ {
		e := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if e == context.Canceled || e == context.DeadlineExceeded {
			return true
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			if next := u.Unwrap(); next != nil {
				stack = append(stack, next)
			}
		case interface{ Unwrap() []error }:
			for _, next := range u.Unwrap() {
				if next != nil {
					stack = append(stack, next)
				}
			}
		}
	}
	return false
}

// isRefused reports a connection that was never made.
func isRefused(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	op, ok := errors.AsType[*net.OpError](err)
	return ok && op.Op == "dial"
}

// isGone reports a connection that failed before a response.
func isGone(err error) bool {
	switch {
	case errors.Is(err, ErrStalled), errors.Is(err, ErrClosedEarly), isReset(err):
		return true
	}
	if dns, ok := errors.AsType[*net.DNSError](err); ok {
		// A name that does not exist will not exist in a minute either.
		return dns.IsTimeout || dns.IsTemporary
	}
	return isRefused(err)
}

// isReset reports a connection that broke before the response. net/http
// returns io.EOF or io.ErrUnexpectedEOF when the server closes it before
// answering: the request was not answered.
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// isTimeout reports a timeout that is not the caller's.
func isTimeout(err error) bool {
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}
