package redisgate_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gate"
	"github.com/outlast-llm/outlast/internal/gatetest"
	"github.com/outlast-llm/outlast/redisgate"
)

// shortLease is the lease of the tests that wait for one to run out. Its
// renewals come every 200 ms, and may be 400 ms late, on a loaded machine,
// before a live holder or waiter is taken for dead.
const shortLease = 600 * time.Millisecond

// TestSuite holds the Gate to the rules that every gate of this module
// follows, package gate's among them.
func TestSuite(t *testing.T) {
	client := newClient(t, redisOptions(t))
	gatetest.Run(t, func(t *testing.T, capacity, maxQueue int) gatetest.Gate {
		return newGate(t, client, redisgate.Options{Capacity: capacity, MaxQueue: maxQueue})
	})
}

// TestSuiteAcrossGates runs the suite over two Gates of one Prefix, each
// with a client of its own, as two processes would have, taking turns: so
// capacity, order, cancellation and handoffs hold across processes.
func TestSuiteAcrossGates(t *testing.T) {
	a, b := newClient(t, redisOptions(t)), newClient(t, redisOptions(t))
	gatetest.Run(t, func(t *testing.T, capacity, maxQueue int) gatetest.Gate {
		opts := redisgate.Options{Capacity: capacity, MaxQueue: maxQueue, Prefix: testPrefix()}
		return &turns{gates: [2]*redisgate.Gate{newGate(t, a, opts), newGate(t, b, opts)}}
	})
}

// turns sends each Acquire to the next of its gates in turn.
type turns struct {
	gates [2]*redisgate.Gate
	n     atomic.Uint32
}

func (g *turns) Acquire(ctx context.Context, key string, queued func(int)) (func(), error) {
	return g.gates[g.n.Add(1)%2].Acquire(ctx, key, queued)
}

func TestErrBusyIs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		err, target error
		want        bool
	}{
		// What a caller of the root package writes about the refusal.
		{"matches root", redisgate.ErrBusy, outlast.ErrBusy, true},
		// Wrapping on the way up must not hide it.
		{"wrapped matches root", fmt.Errorf("gateway: %w", redisgate.ErrBusy), outlast.ErrBusy, true},
		// The root's and the in-process gate's match it back.
		{"root matches", outlast.ErrBusy, redisgate.ErrBusy, true},
		{"gate matches", gate.ErrBusy, redisgate.ErrBusy, true},
		// Unavailability is not a refusal: a caller may fall back.
		{"unavailable is not busy", redisgate.ErrUnavailable, outlast.ErrBusy, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := errors.Is(tt.err, tt.target); got != tt.want {
				t.Errorf("errors.Is(%v, %v) = %v, want %v", tt.err, tt.target, got, tt.want)
			}
		})
	}
}

// TestRoundTrips counts the commands sent for an uncontended Acquire and
// its release: one script each. Not parallel, and with the default lease,
// so that no renewal falls inside the count.
func TestRoundTrips(t *testing.T) {
	client := newClient(t, redisOptions(t))
	var c counter
	client.AddHook(&c)
	g := newGate(t, client, redisgate.Options{Capacity: 1})
	ctx := context.Background()
	acquireRelease := func() {
		release, err := g.Acquire(ctx, "k", nil)
		if err != nil {
			t.Fatal(err)
		}
		release()
	}
	// The first use may load the scripts (EVALSHA, then EVAL) and dial.
	acquireRelease()
	const n = 50
	c.n.Store(0)
	for range n {
		acquireRelease()
	}
	if got := c.n.Load(); got != 2*n {
		t.Errorf("%d uncontended Acquires and releases: %d round trips, want %d", n, got, 2*n)
	}
}

// TestHandoffRoundTrips counts what a handoff costs: the release's one
// script, and nothing more for the waiter, which learns of its grant from
// the published message.
func TestHandoffRoundTrips(t *testing.T) {
	client := newClient(t, redisOptions(t))
	var c counter
	client.AddHook(&c)
	g := newGate(t, client, redisgate.Options{Capacity: 1, MaxQueue: 1})
	// A first wait starts the subscription, and checks once when it takes
	// hold; what follows counts the steady state.
	release := take(t, g, "k")
	w := startWaiter(t, g, "k")
	release()
	if _, err := w.wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	release = w.rel
	w = startWaiter(t, g, "k") // one script: queued
	c.n.Store(0)
	release()
	if _, err := w.wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := c.n.Load(); got != 1 {
		t.Errorf("handoff: %d round trips, want 1 (the release)", got)
	}
}

// TestDeadHolderReaped: a holder that stops renewing loses its slot when its
// lease runs out, to the waiter behind it, and not before.
func TestDeadHolderReaped(t *testing.T) {
	t.Parallel()
	client := newClient(t, redisOptions(t))
	g := newGate(t, client, redisgate.Options{Capacity: 1, MaxQueue: 1, Lease: shortLease})
	dead := time.Now()
	if held, err := redisgate.Forsake(context.Background(), g, "k"); err != nil || !held {
		t.Fatalf("Forsake: held %v, err %v; want held", held, err)
	}
	w := startWaiter(t, g, "k")
	// The waiter is granted by its own heartbeat, which reaps the holder.
	if _, err := w.wait(t, 10*time.Second); err != nil {
		t.Fatalf("waiter behind a dead holder: %v", err)
	}
	// Redis's clock and this one are the same machine's: a grant before the
	// lease ran out, less a little for rounding, would be a slot made up.
	if got := w.got.Sub(dead); got < shortLease-20*time.Millisecond {
		t.Errorf("waiter granted %v after the holder died, want no sooner than its lease, %v", got, shortLease)
	}
	checkLoad(t, g, "k", 1, 0)
	w.release()
	checkLoad(t, g, "k", 0, 0)
}

// TestDeadHolderReapedIdle: with nobody waiting, the slot of a dead holder
// is free again once its lease has run out.
func TestDeadHolderReapedIdle(t *testing.T) {
	t.Parallel()
	client := newClient(t, redisOptions(t))
	g := newGate(t, client, redisgate.Options{Capacity: 1, Lease: shortLease})
	if held, err := redisgate.Forsake(context.Background(), g, "k"); err != nil || !held {
		t.Fatalf("Forsake: held %v, err %v; want held", held, err)
	}
	checkLoad(t, g, "k", 1, 0)
	eventually(t, 10*time.Second, "dead holder reaped", func() bool {
		in, _ := load(t, g, "k")
		return in == 0
	})
	take(t, g, "k")()
}

// TestLiveHolderKeepsSlot: a holder that is alive keeps its slot for as
// long as it holds it, leases on end.
func TestLiveHolderKeepsSlot(t *testing.T) {
	t.Parallel()
	client := newClient(t, redisOptions(t))
	g := newGate(t, client, redisgate.Options{Capacity: 1, MaxQueue: 1, Lease: shortLease})
	release := take(t, g, "k")
	w := startWaiter(t, g, "k")
	// Real time has to pass here: three leases, over which the holder
	// renews and the waiter heartbeats nine times.
	time.Sleep(3 * shortLease)
	checkLoad(t, g, "k", 1, 1)
	select {
	case err := <-w.done:
		t.Fatalf("waiter returned (%v) while the slot was held", err)
	default:
	}
	release()
	if _, err := w.wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestDeadWaiterReaped: a waiter whose heartbeat stops is reaped and does
// not hold up the queue behind it.
func TestDeadWaiterReaped(t *testing.T) {
	t.Parallel()
	client := newClient(t, redisOptions(t))
	g := newGate(t, client, redisgate.Options{Capacity: 1, MaxQueue: 2, Lease: shortLease})
	release := take(t, g, "k")
	if held, err := redisgate.Forsake(context.Background(), g, "k"); err != nil || held {
		t.Fatalf("Forsake: held %v, err %v; want queued", held, err)
	}
	w := startWaiter(t, g, "k")
	checkLoad(t, g, "k", 1, 2)
	// The live waiter's heartbeats reap the dead one ahead of it.
	eventually(t, 10*time.Second, "dead waiter reaped", func() bool {
		_, waiting := load(t, g, "k")
		return waiting == 1
	})
	release()
	if _, err := w.wait(t, 10*time.Second); err != nil {
		t.Fatalf("waiter behind a dead one: %v", err)
	}
}

// TestDeadRedis: with nothing listening where Redis should be, Acquire and
// Load fail within the Timeout, with errors that say what failed and that
// a caller can tell apart to fall back.
func TestDeadRedis(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { client.Close() })
	g := newGate(t, client, redisgate.Options{Capacity: 1, Timeout: timeout})
	for _, tt := range []struct {
		op   string
		call func() error
	}{
		{"acquire", func() error {
			_, err := g.Acquire(context.Background(), "k", nil)
			return err
		}},
		{"load", func() error {
			_, _, err := g.Load(context.Background(), "k")
			return err
		}},
	} {
		start := time.Now()
		err := tt.call()
		if d := time.Since(start); d > timeout+time.Second {
			t.Errorf("%s took %v, want about the timeout, %v", tt.op, d, timeout)
		}
		if !errors.Is(err, redisgate.ErrUnavailable) {
			t.Errorf("%s: err %v, want ErrUnavailable", tt.op, err)
		}
		if prefix := "redisgate: " + tt.op + ` "k": `; err == nil || !strings.HasPrefix(err.Error(), prefix) {
			t.Errorf("%s: err %q, want it to start %q", tt.op, err, prefix)
		}
		// Neither a refusal nor the caller's own deadline.
		if errors.Is(err, outlast.ErrBusy) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: err %v is busy or DeadlineExceeded", tt.op, err)
		}
	}
}

// TestPartition: when Redis stops answering with the connections still
// open, no call hangs: release returns, Acquire and a waiter fail within
// the Timeout, and the slots they had lapse with their leases.
func TestPartition(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	opts := redisOptions(t)
	direct := newClient(t, opts)
	hole := newBlackhole(t, opts.Addr)
	popts := *opts
	popts.Addr = hole.addr()
	// Timeout bounds each call's reads only with ContextTimeoutEnabled, and
	// the subscription's handshake only through ReadTimeout.
	popts.ContextTimeoutEnabled = true
	popts.ReadTimeout, popts.WriteTimeout = timeout, timeout
	prefix := testPrefix()
	cut := newGate(t, newClient(t, &popts), redisgate.Options{Capacity: 1, MaxQueue: 1, Lease: shortLease, Timeout: timeout, Prefix: prefix})
	observer := newGate(t, direct, redisgate.Options{Capacity: 1, MaxQueue: 1, Lease: shortLease, Prefix: prefix})

	release := take(t, cut, "k")
	w := startWaiter(t, cut, "k")
	hole.holed.Store(true)

	start := time.Now()
	release()
	if d := time.Since(start); d > 2*timeout+time.Second {
		t.Errorf("release took %v, want at most about twice the timeout, %v", d, timeout)
	}
	start = time.Now()
	_, err := cut.Acquire(context.Background(), "other", nil)
	if d := time.Since(start); d > timeout+time.Second {
		t.Errorf("Acquire took %v, want about the timeout, %v", d, timeout)
	}
	if !errors.Is(err, redisgate.ErrUnavailable) {
		t.Errorf("Acquire: err %v, want ErrUnavailable", err)
	}
	// The waiter's next heartbeat fails, a third of a lease on at most.
	if _, err := w.wait(t, 10*time.Second); !errors.Is(err, redisgate.ErrUnavailable) {
		t.Errorf("waiter: err %v, want ErrUnavailable", err)
	}
	// Behind the partition, Redis reaps what the cut-off process had.
	eventually(t, 10*time.Second, "cut-off holder and waiter reaped", func() bool {
		in, waiting := load(t, observer, "k")
		return in == 0 && waiting == 0
	})
	// Close ends the subscription, whose connection is cut off too, within
	// the client's ReadTimeout.
	start = time.Now()
	cut.Close()
	if d := time.Since(start); d > timeout+time.Second {
		t.Errorf("Close took %v, want about the client's ReadTimeout, %v", d, timeout)
	}
}

// TestLostWakeup: a waiter whose grant message is lost, because its Gate's
// subscription never took hold, still gets the slot, from its heartbeat.
func TestLostWakeup(t *testing.T) {
	t.Parallel()
	opts := redisOptions(t)
	hole := newBlackhole(t, opts.Addr)
	popts := *opts
	popts.Addr = hole.addr()
	// One pooled connection, made before the hole opens, serves every
	// call; the subscription's own connection comes after, into the hole.
	// ReadTimeout bounds its handshake, and so Close.
	popts.PoolSize = 1
	popts.ReadTimeout = 300 * time.Millisecond
	prefix := testPrefix()
	deaf := newGate(t, newClient(t, &popts), redisgate.Options{Capacity: 1, MaxQueue: 1, Lease: shortLease, Prefix: prefix})
	holder := newGate(t, newClient(t, opts), redisgate.Options{Capacity: 1, MaxQueue: 1, Lease: shortLease, Prefix: prefix})
	checkLoad(t, deaf, "k", 0, 0) // dials the pooled connection
	hole.holeNew.Store(true)

	release := take(t, holder, "k")
	w := startWaiter(t, deaf, "k")
	release() // publishes the grant to a subscription that is not there
	waited, err := w.wait(t, 10*time.Second)
	if err != nil {
		t.Fatalf("waiter whose grant message was lost: %v", err)
	}
	// Sooner, and the message was not lost: the test would test nothing.
	if heartbeat := shortLease / 3; waited < heartbeat {
		t.Errorf("waiter granted after %v, want no sooner than its first heartbeat, %v", waited, heartbeat)
	}
	checkLoad(t, holder, "k", 1, 0)
}

// TestIdleKeysExpire: a key's structures carry an expiry while in use, and
// are gone, or going, once it is idle.
func TestIdleKeysExpire(t *testing.T) {
	t.Parallel()
	client := newClient(t, redisOptions(t))
	g := newGate(t, client, redisgate.Options{Capacity: 1, MaxQueue: 1, Lease: shortLease})
	names := redisgate.RedisKeys(g, "k")
	release := take(t, g, "k")
	w := startWaiter(t, g, "k")
	ctx := context.Background()
	for _, name := range names {
		if ttl := client.PTTL(ctx, name).Val(); ttl <= 0 || ttl > 3*shortLease {
			t.Errorf("PTTL %s = %v while in use, want in (0, %v]", name, ttl, 3*shortLease)
		}
	}
	release()
	if _, err := w.wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	w.release()
	// Empty sets are deleted; the ticket counter lapses.
	if n := client.Exists(ctx, names[1:]...).Val(); n != 0 {
		t.Errorf("%d of the holders, queue and heartbeats left on an idle key, want 0", n)
	}
	eventually(t, 10*time.Second, "ticket counter lapsed", func() bool {
		return client.Exists(ctx, names[0]).Val() == 0
	})
}

// TestEmptyKey: the empty key's Redis keys, a Gate's and a Fleet's, share
// the hash tag {bound}: {} is none, and a Cluster would put a script's
// keys in different slots. The gateway's own bounds, the key "", are
// where the gateway kept them when it named them "bound" itself.
func TestEmptyKey(t *testing.T) {
	t.Parallel()
	client := newClient(t, redisOptions(t))
	ctx := context.Background()
	exists := func(name string) {
		t.Helper()
		if n := client.Exists(ctx, name).Val(); n != 1 {
			t.Errorf("%s: got %d keys, want 1", name, n)
		}
	}
	gp := testPrefix()
	g := newGate(t, client, redisgate.Options{Capacity: 1, Prefix: gp})
	take(t, g, "")
	exists(gp + "{bound}:h")
	checkLoad(t, g, "", 1, 0)

	fp := testPrefix()
	f := redisgate.NewFleet(client, redisgate.FleetOptions{Prefix: fp})
	t.Cleanup(func() { f.Close() })
	done, ok := f.Probe("")
	if !ok {
		t.Fatal("the probe of a new key: refused, want taken")
	}
	exists(fp + "{bound}:p")
	release, err := f.Send(ctx, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	exists(fp + "send:{bound}:h")
	release()
	done(outlast.FleetState{State: outlast.Healthy})
	exists(fp + "{bound}:s")
}

// TestClose: Close ends the waits in progress and refuses new ones, and
// leaves holds to their release.
func TestClose(t *testing.T) {
	t.Parallel()
	client := newClient(t, redisOptions(t))
	g := newGate(t, client, redisgate.Options{Capacity: 1, MaxQueue: 1})
	release := take(t, g, "k")
	w := startWaiter(t, g, "k")
	g.Close()
	if _, err := w.wait(t, 10*time.Second); !errors.Is(err, redisgate.ErrClosed) {
		t.Errorf("waiter at Close: err %v, want ErrClosed", err)
	}
	if _, err := g.Acquire(context.Background(), "k", nil); !errors.Is(err, redisgate.ErrClosed) {
		t.Errorf("Acquire after Close: err %v, want ErrClosed", err)
	}
	checkLoad(t, g, "k", 1, 0)
	release()
	checkLoad(t, g, "k", 0, 0)
}

// TestLoadAcrossGates: Load counts every process's holders and waiters.
func TestLoadAcrossGates(t *testing.T) {
	t.Parallel()
	opts := redisgate.Options{Capacity: 2, MaxQueue: 2, Prefix: testPrefix()}
	a := newGate(t, newClient(t, redisOptions(t)), opts)
	b := newGate(t, newClient(t, redisOptions(t)), opts)
	checkLoad(t, a, "k", 0, 0)
	take(t, a, "k")
	take(t, b, "k")
	startWaiter(t, b, "k")
	checkLoad(t, a, "k", 2, 1)
	checkLoad(t, b, "k", 2, 1)
	checkLoad(t, a, "other", 0, 0)
}

// BenchmarkAcquireRelease measures one uncontended Acquire and release on
// one key, beside the in-process gate's: the cost that sharing the gate
// through Redis adds to every request when the server is not busy.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	b.Run("impl=gate", func(b *testing.B) {
		g := gate.New(1, 0)
		b.ReportAllocs()
		for b.Loop() {
			release, err := g.Acquire(ctx, "k", nil)
			if err != nil {
				b.Fatal(err)
			}
			release()
		}
	})
	b.Run("impl=redisgate", func(b *testing.B) {
		g := newGate(b, newClient(b, redisOptions(b)), redisgate.Options{Capacity: 1})
		b.ReportAllocs()
		for b.Loop() {
			release, err := g.Acquire(ctx, "k", nil)
			if err != nil {
				b.Fatal(err)
			}
			release()
		}
	})
}
