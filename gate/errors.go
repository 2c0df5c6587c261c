package gate

// ErrBusy is the error [Gate.Acquire] returns when a key's queue is full.
// Waiting would not help, so callers should not retry it at once.
//
// errors.Is(ErrBusy, outlast.ErrBusy) holds without this package importing
// outlast: the root package's ErrBusy and this one both match any error whose
// Busy method reports true.
var ErrBusy error = busyError{}

// busyError is a value type, so returning ErrBusy allocates nothing.
type busyError struct{}

func (busyError) Error() string { return "gate: queue is full" }

// Busy reports that the error is a gate's refusal; see [ErrBusy].
func (busyError) Busy() bool { return true }

// Is matches any busy refusal, such as outlast.ErrBusy or a redisgate's, by
// its Busy method rather than by identity, so that packages that cannot
// import each other still agree on what busy means.
func (busyError) Is(target error) bool {
	b, ok := target.(interface{ Busy() bool })
	return ok && b.Busy()
}
