package main

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outlast-llm/outlast/record"
)

// ledger is what the gateway told its record.Observer over a phase: when
// each attempt joined the gate, as far as a shared counter can say, and
// each request's end.
type ledger struct {
	clock        *atomic.Int64 // the phase's counter, shared with the callers
	slots, queue int

	doneWake   chan struct{} // cap 1: a request was done
	queuedWake chan struct{} // cap 1: an attempt joined the queue; read by the probe alone
	doneCount  atomic.Int64

	mu       sync.Mutex // guards the fields below
	joins    map[attemptKey]*join
	requests map[string]*finished // by request ID
	twice    []string             // requests done more than once
	overfull []string             // attempts that queued past the queue's bound
}

// A join is one attempt's place in the gate's order, bracketed by the
// counter: the attempt joined after before and before after. Zero means
// unknown.
type join struct {
	key    string
	before int64 // read before it joined: its caller's send, or its previous attempt's end
	after  int64 // read after it joined: its Queued hook, or its AttemptStart if it did not queue
	queued bool
}

// finished is a request as Done saw it.
type finished struct {
	tag       string
	status    int
	kind      string // record.Request.Error
	attempts  int
	gateWaits []time.Duration
}

func newLedger(clock *atomic.Int64, slots, queue int) *ledger {
	return &ledger{
		clock: clock, slots: slots, queue: queue,
		doneWake: make(chan struct{}, 1), queuedWake: make(chan struct{}, 1),
		joins: map[attemptKey]*join{}, requests: map[string]*finished{},
	}
}

// observer returns the hooks, for server.Config.Observer. The counter is
// read at the top of each hook, before anything else it does.
func (l *ledger) observer() record.Observer {
	return record.Observer{
		Queued: func(r *record.Request, key string, ahead int) {
			now := l.clock.Add(1)
			k := attemptKey{r.Run, len(r.Attempts) + 1}
			l.mu.Lock()
			j := l.join(k)
			j.key, j.after, j.queued = key, now, true
			// A waiter joins behind every slot's holder and the waiters
			// before it: ahead is the slots plus its place in the queue,
			// which holds at most queue.
			if ahead < l.slots || ahead > l.slots+l.queue-1 {
				l.overfull = append(l.overfull, fmt.Sprintf("attempt %d of %s queued with %d ahead; with %d slots and a queue of %d, want %d to %d",
					k.n, k.tag, ahead, l.slots, l.queue, l.slots, l.slots+l.queue-1))
			}
			l.mu.Unlock()
			signal(l.queuedWake)
		},
		AttemptStart: func(r *record.Request, a record.Attempt) {
			now := l.clock.Add(1)
			l.mu.Lock()
			j := l.join(attemptKey{r.Run, a.N})
			if !j.queued {
				j.key, j.after = a.Key, now
			}
			l.mu.Unlock()
		},
		AttemptEnd: func(r *record.Request, a record.Attempt) {
			// The next attempt, if any, joins the gate after its wait,
			// which starts after this hook.
			now := l.clock.Add(1)
			if a.RetryIn <= 0 {
				return
			}
			l.mu.Lock()
			l.join(attemptKey{r.Run, a.N + 1}).before = now
			l.mu.Unlock()
		},
		Done: func(r *record.Request) {
			f := &finished{tag: r.Run, status: r.Status, kind: r.Error, attempts: len(r.Attempts)}
			for _, a := range r.Attempts {
				f.gateWaits = append(f.gateWaits, a.GateWait)
			}
			l.mu.Lock()
			if l.requests[r.ID] != nil {
				l.twice = append(l.twice, fmt.Sprintf("request %s (%s) was done twice", r.ID, r.Run))
			}
			l.requests[r.ID] = f
			l.mu.Unlock()
			l.doneCount.Add(1)
			signal(l.doneWake)
		},
	}
}

// join returns k's join, adding it. l.mu must be held.
func (l *ledger) join(k attemptKey) *join {
	j := l.joins[k]
	if j == nil {
		j = &join{}
		l.joins[k] = j
	}
	return j
}

// sent notes that the caller of tag read now from the counter just
// before sending it: its first attempt joins the gate after.
func (l *ledger) sent(tag string, now int64) {
	l.mu.Lock()
	l.join(attemptKey{tag, 1}).before = now
	l.mu.Unlock()
}
