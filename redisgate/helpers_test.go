package redisgate_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/outlast-llm/outlast/redisgate"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// redisURL is where the tests find Redis, such as redis://127.0.0.1:6379/0.
const redisURL = "OUTLAST_TEST_REDIS"

// redisOptions returns the options of the test Redis, skipping the test if
// OUTLAST_TEST_REDIS is unset.
func redisOptions(tb testing.TB) *redis.Options {
	tb.Helper()
	url := os.Getenv(redisURL)
	if url == "" {
		tb.Skipf("%s is unset", redisURL)
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		tb.Fatalf("%s: %v", redisURL, err)
	}
	return opts
}

// newClient returns a client of the test Redis, closed at the test's end.
func newClient(tb testing.TB, opts *redis.Options) *redis.Client {
	tb.Helper()
	c := redis.NewClient(opts)
	tb.Cleanup(func() { c.Close() })
	return c
}

// testPrefix returns a Prefix that no other test or run uses.
func testPrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "outlast:test:" + hex.EncodeToString(b[:]) + ":"
}

// newGate returns a Gate on client, closed at the test's end, under opts,
// with a fresh Prefix unless opts has one.
func newGate(tb testing.TB, client redis.UniversalClient, opts redisgate.Options) *redisgate.Gate {
	tb.Helper()
	if opts.Prefix == "" {
		opts.Prefix = testPrefix()
	}
	g := redisgate.New(client, opts)
	tb.Cleanup(func() { g.Close() })
	return g
}

// eventually polls cond every few ms until it holds, failing the test if
// it does not within bound. It is for what only real time brings about: a
// lease running out.
func eventually(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, bound)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// load returns g.Load(key), failing the test on an error.
func load(t *testing.T, g *redisgate.Gate, key string) (inFlight, waiting int) {
	t.Helper()
	inFlight, waiting, err := g.Load(context.Background(), key)
	if err != nil {
		t.Fatalf("Load(%q): %v", key, err)
	}
	return inFlight, waiting
}

// checkLoad fails the test unless g.Load(key) reports inFlight and waiting.
func checkLoad(t *testing.T, g *redisgate.Gate, key string, inFlight, waiting int) {
	t.Helper()
	if gotIn, gotWait := load(t, g, key); gotIn != inFlight || gotWait != waiting {
		t.Errorf("Load(%q) = %d, %d; want %d, %d", key, gotIn, gotWait, inFlight, waiting)
	}
}

// take acquires key at once, failing the test if that needs a wait.
func take(t *testing.T, g *redisgate.Gate, key string) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release, err := g.Acquire(ctx, key, func(int) { cancel() })
	if err != nil {
		t.Fatalf("Acquire(%q): %v; want taken at once", key, err)
	}
	t.Cleanup(release)
	return release
}

// waiter is an Acquire in a goroutine of its own.
type waiter struct {
	cancel context.CancelFunc
	queued chan int
	done   chan error
	mu     sync.Mutex
	start  time.Time // when Acquire was called
	got    time.Time // when it returned
	rel    func()
}

// startWaiter runs g.Acquire(key) in a goroutine and waits for it to
// queue. The test's cleanup cancels it and releases what it got.
func startWaiter(t *testing.T, g *redisgate.Gate, key string) *waiter {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &waiter{cancel: cancel, queued: make(chan int, 1), done: make(chan error, 1), start: time.Now()}
	go func() {
		release, err := g.Acquire(ctx, key, func(ahead int) { w.queued <- ahead })
		w.mu.Lock()
		w.got, w.rel = time.Now(), release
		w.mu.Unlock()
		w.done <- err
	}()
	t.Cleanup(func() {
		cancel()
		<-w.done
		w.release()
	})
	select {
	case <-w.queued:
	case err := <-w.done:
		t.Fatalf("Acquire(%q) returned %v; want it queued", key, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("Acquire(%q) did not queue", key)
	}
	return w
}

// wait waits up to bound for the waiter's Acquire to return, and returns
// its error and how long after its start it returned.
func (w *waiter) wait(t *testing.T, bound time.Duration) (time.Duration, error) {
	t.Helper()
	select {
	case err := <-w.done:
		w.done <- err // for the cleanup
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.got.Sub(w.start), err
	case <-time.After(bound):
		t.Fatalf("Acquire did not return within %v", bound)
		return 0, nil
	}
}

// release releases the waiter's slot, if it got one.
func (w *waiter) release() {
	w.mu.Lock()
	release := w.rel
	w.mu.Unlock()
	if release != nil {
		release()
	}
}

// counter is a go-redis hook that counts round trips: each command sent
// alone, and each pipeline.
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

// blackhole is a TCP proxy to Redis that can stop passing bytes on, while
// keeping every connection open: a network partition, as a client sees it.
type blackhole struct {
	ln      net.Listener
	target  string
	holed   atomic.Bool // every connection passes nothing on
	holeNew atomic.Bool // connections accepted from now on pass nothing on
	wg      sync.WaitGroup

	mu    sync.Mutex // guards conns
	conns []net.Conn
}

// newBlackhole starts a proxy to target, stopped at the test's end.
func newBlackhole(t *testing.T, target string) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln, target: target}
	b.wg.Go(b.accept)
	t.Cleanup(b.close)
	return b
}

func (b *blackhole) addr() string { return b.ln.Addr().String() }

func (b *blackhole) accept() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", b.target)
		if err != nil {
			c.Close()
			continue
		}
		b.mu.Lock()
		b.conns = append(b.conns, c, up)
		b.mu.Unlock()
		lost := b.holeNew.Load()
		b.wg.Go(func() { b.pipe(up, c, lost) })
		b.wg.Go(func() { b.pipe(c, up, lost) })
	}
}

// pipe copies from src to dst, dropping what it reads if lost or while
// holed.
func (b *blackhole) pipe(dst, src net.Conn, lost bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !lost && !b.holed.Load() {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (b *blackhole) close() {
	b.ln.Close()
	b.mu.Lock()
	for _, c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}
