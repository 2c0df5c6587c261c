package redisgate

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// ErrBusy is the error [Gate.Acquire] returns when a key's queue is full.
// Waiting would not help, so callers should not retry it at once.
//
// errors.Is(ErrBusy, outlast.ErrBusy) holds without this package importing
// outlast, as for package gate: the busy errors of all three packages match
// any error whose Busy method reports true.
var ErrBusy error = busyError{}

// busyError is a value type, so returning ErrBusy allocates nothing.
type busyError struct{}

func (busyError) Error() string { return "redisgate: queue is full" }

// Busy reports that the error is a gate's refusal; see [ErrBusy].
func (busyError) Busy() bool { return true }

// Is matches any busy refusal, such as outlast.ErrBusy or gate.ErrBusy, by
// its Busy method rather than by identity, so that packages that cannot
// import each other still agree on what busy means.
func (busyError) Is(target error) bool {
	b, ok := target.(interface{ Busy() bool })
	return ok && b.Busy()
}

// ErrUnavailable is matched, through errors.Is, by every error that a Gate
// returns because Redis could not be used: it did not answer within
// [Options.Timeout], the connection failed, a script failed, or a waiter's
// place lapsed because its heartbeats did not reach Redis. The error also
// wraps the cause and names what failed, as in
//
//	redisgate: acquire "llama:8080": dial tcp 127.0.0.1:6379: connect: connection refused
//
// A caller that can do without the shared gate, such as a gateway that
// falls back to an in-process one, tells these errors apart by it.
var ErrUnavailable = errors.New("redisgate: redis is unavailable")

// ErrClosed is returned by Acquire once [Gate.Close] has been called, and
// by an Acquire that was waiting when it was.
var ErrClosed = errors.New("redisgate: gate is closed")

// errPlaceLost is the cause of an unavailable error for a waiter whose
// entry Redis reaped: its heartbeats stopped reaching Redis for a lease.
var errPlaceLost = errors.New("the place in the queue lapsed before it was granted")

// opError is a failure to use Redis for one operation on one key.
type opError struct {
	op  string // acquire, load
	key string
	err error
}

func (e *opError) Error() string {
	return "redisgate: " + e.op + " " + strconv.Quote(e.key) + ": " + e.err.Error()
}

func (e *opError) Unwrap() error { return e.err }

// Is makes every opError match ErrUnavailable.
func (e *opError) Is(target error) bool { return target == ErrUnavailable }

// timeoutError replaces the context.DeadlineExceeded of a call that ran out
// of [Options.Timeout]: the caller's own context had not ended, and an
// error that said DeadlineExceeded would read as if it had.
type timeoutError struct{ d time.Duration }

func (e timeoutError) Error() string { return "no answer from redis within " + e.d.String() }

// Timeout reports that the error is a timeout, as net.Error does.
func (timeoutError) Timeout() bool { return true }

// fail returns the error of op on key that failed with err, a Redis call's
// error under a context derived from ctx: ctx's own end if it has ended,
// else an error that matches ErrUnavailable.
func (g *Gate) fail(ctx context.Context, op, key string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = timeoutError{g.timeout}
	}
	return &opError{op: op, key: key, err: err}
}

// errReply is the cause of an unavailable error for a script whose reply
// is not what this package sent it to give: keys of another shape under
// the Prefix, say.
var errReply = errors.New("unexpected reply from a script")
