package outlast

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/outlast-llm/outlast/internal/owned"
)

// An Attempt is the record of one try at a request: one model call, as a
// host's record shows it. Each attempt is reported twice to [Hooks]: at its
// start, with End, Status, Err, Class and RetryIn zero, and at its end.
type Attempt struct {
	// CallID identifies the attempt: a UUIDv7, unique and time-ordered, so
	// sorting the IDs sorts the attempts.
	CallID string
	// N is the attempt's number, 1 for the first.
	N int
	// Upstream is the Transport's Name, if it has one.
	Upstream string
	// Key is the gate key the attempt held, or "" without a gate.
	Key string
	// Ahead is how many held or waited for the key when this attempt
	// joined its queue; 0 when it did not queue.
	Ahead int
	// GateWait is how long the attempt waited at the gate.
	GateWait time.Duration
	// AdmissionWait is how long the attempt waited for its upstream at
	// an [Admission], before the gate, while the upstream was down or
	// recovering.
	AdmissionWait time.Duration
	// Probe reports that the attempt was its upstream's one probe, sent
	// while an Admission held the key down.
	Probe bool
	// Start is when the attempt was sent, after the gate.
	Start time.Time
	// End is when its response (or its first body byte, with
	// Transport.FirstByteTimeout) or its error arrived.
	End time.Time
	// Status is the response's status, or 0 if there was none.
	Status int
	// Err is the failure: a *StatusError for a failed status, the
	// transport's error, or nil for the result that was returned.
	Err error
	// Class is Err's class, as Classify judges it when the attempt ends:
	// ClassNone for the result that was returned. Observers show this
	// rather than judging Err again.
	Class Class
	// RetryAfter is the delay the server asked for, if any, as it was
	// used: cut to the Transport's MaxRetryAfter when longer.
	RetryAfter time.Duration
	// RetryAfterCut reports that the server asked for a longer delay than
	// the Transport's MaxRetryAfter, and RetryAfter is that bound.
	RetryAfterCut bool
	// RetryIn is the wait before the next attempt, when one follows. The
	// last attempt has none.
	RetryIn time.Duration
}

// Hooks are told of every attempt, so that a host can keep its own record
// of each try and each wait. Any of them may be nil. They are called
// synchronously, in order, in the goroutine that made the request, and the
// last attempt's end is reported before RoundTrip or Do returns. A Hooks
// value used by several requests at once is called concurrently for
// different requests.
type Hooks struct {
	// AttemptStart is called when an attempt is sent.
	AttemptStart func(Attempt)
	// AttemptEnd is called when an attempt has its result. RetryIn is set
	// when another attempt will follow.
	AttemptEnd func(Attempt)
	// Queued is called when a request joins a gate's queue, with the gate
	// key and how many are ahead of it.
	Queued func(key string, ahead int)
}

func (h *Hooks) any() bool {
	return h != nil && (h.AttemptStart != nil || h.AttemptEnd != nil || h.Queued != nil)
}

// WithHooks returns a copy of ctx that carries h. [Do] and [Transport]
// report the attempts of requests made with the context to h, after the
// Transport's own Hooks. A proxy uses it to tie attempts to the request it
// is serving.
func WithHooks(ctx context.Context, h Hooks) context.Context {
	return context.WithValue(ctx, owned.HooksKey{}, &h)
}

// methodHooks are Hooks as methods. The gateway's exchange has them, and
// marks its contexts with itself (owned.Mark): it hears of its attempts
// with no closure made for each request.
type methodHooks interface {
	AttemptStart(Attempt)
	AttemptEnd(Attempt)
	Queued(key string, ahead int)
}

// callHooks are the hooks that one request reports its attempts to: the
// Transport's own, then those its context carries, the nearest of
// WithHooks' and the methods of what marked it (owned.Mark).
type callHooks struct {
	transport, request *Hooks
	methods            methodHooks
}

// hooksOf returns the callHooks of a request made with ctx, after t. One
// lookup finds either kind.
func hooksOf(t *Hooks, ctx context.Context) callHooks {
	h := callHooks{transport: t}
	switch v := ctx.Value(owned.HooksKey{}).(type) {
	case *Hooks:
		h.request = v
	case methodHooks:
		h.methods = v
	}
	return h
}

func (h callHooks) active() bool {
	return h.transport.any() || h.request.any() || h.methods != nil
}

func (h callHooks) start(at Attempt) {
	for _, x := range [2]*Hooks{h.transport, h.request} {
		if x != nil && x.AttemptStart != nil {
			x.AttemptStart(at)
		}
	}
	if h.methods != nil {
		h.methods.AttemptStart(at)
	}
}

func (h callHooks) end(at Attempt) {
	for _, x := range [2]*Hooks{h.transport, h.request} {
		if x != nil && x.AttemptEnd != nil {
			x.AttemptEnd(at)
		}
	}
	if h.methods != nil {
		h.methods.AttemptEnd(at)
	}
}

func (h callHooks) queued(key string, ahead int) {
	for _, x := range [2]*Hooks{h.transport, h.request} {
		if x != nil && x.Queued != nil {
			x.Queued(key, ahead)
		}
	}
	if h.methods != nil {
		h.methods.Queued(key, ahead)
	}
}

// callIDs makes UUIDv7s (RFC 9562 §5.7). Within one millisecond the 12-bit
// rand_a field counts up (§6.2 method 1), so IDs made by one process sort
// in the order they were made.
var callIDs struct {
	mu  sync.Mutex // guards ms and seq
	ms  int64
	seq uint16
}

// NewCallID returns a new UUIDv7 in its canonical text form. Attempts get
// theirs from it; a host may use it for IDs of its own that sort with them.
func NewCallID() string {
	var u [16]byte
	now := time.Now().UnixMilli()
	callIDs.mu.Lock()
	if now <= callIDs.ms {
		// The clock stood still or went back: keep counting from the last
		// millisecond so that IDs stay ordered.
		now = callIDs.ms
		callIDs.seq++
		if callIDs.seq > 0xfff {
			now++
			callIDs.seq = 0
		}
	} else {
		callIDs.seq = 0
	}
	callIDs.ms = now
	seq := callIDs.seq
	callIDs.mu.Unlock()

	binary.BigEndian.PutUint64(u[0:8], uint64(now)<<16)
	u[6] = 0x70 | byte(seq>>8&0x0f) // version 7
	u[7] = byte(seq)
	// math/rand/v2's generator is ChaCha8, seeded by the OS: IDs from
	// several processes, sharing a journal, do not collide, and unlike
	// crypto/rand's it takes no system call and lets u stay on the stack.
	binary.BigEndian.PutUint64(u[8:], rand.Uint64())
	u[8] = 0x80 | u[8]&0x3f // variant 10
	return formatUUID(&u)
}

func formatUUID(u *[16]byte) string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	hex.Encode(b[9:13], u[4:6])
	hex.Encode(b[14:18], u[6:8])
	hex.Encode(b[19:23], u[8:10])
	hex.Encode(b[24:], u[10:])
	b[8], b[13], b[18], b[23] = '-', '-', '-', '-'
	return string(b[:])
}
