package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gate"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/internal/redact"
	"github.com/outlast-llm/outlast/redisgate"
)

// redisTimeout bounds every call the gateway makes to Redis.
const redisTimeout = 500 * time.Millisecond

// go-redis logs through one logger for the process, in plain text to
// stderr by default: a line a second while Redis is down, in the middle
// of serve's JSON. redisLogger sends its lines to the latest server's
// logger instead, at debug level: the Monitor's warning says the same to
// the operator, once.
var (
	redisLog     atomic.Pointer[slog.Logger]
	redisLogOnce sync.Once
)

type redisLogger struct{}

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if l := redisLog.Load(); l != nil {
		l.DebugContext(ctx, "outlast: redis: "+redact.Text(fmt.Sprintf(format, v...)))
	}
}

// shared is what the gateway keeps in Redis, with Config.Redis: each
// upstream's gates (redisgate.Gate, with this process's own in their place
// while Redis cannot be reached) and its Admission's state
// (redisgate.Fleet).
type shared struct {
	client  *redis.Client
	mon     *redisgate.Monitor
	replica string
	closers []func() error
}

// openShared connects to the Redis that url names, and wires the gates
// and admissions of gc to it. A Redis down at start is a degraded one,
// not an error: one ping at start (500 ms at most) finds it so at once,
// for the log, health and metrics, rather than the first request that
// needs it.
func openShared(url string, gc *gateway.Config, logger *slog.Logger) (*shared, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis %q: %v: want a URL such as redis://127.0.0.1:6379/0", redactRedis(url), err)
	}
	// A context's deadline bounds reads and writes only with this set.
	opts.ContextTimeoutEnabled = true
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = redisTimeout, redisTimeout, redisTimeout
	opts.MaxRetries = -1 // a retry would double the time to learn that Redis is gone
	redisLog.Store(logger)
	redisLogOnce.Do(func() { redis.SetLogger(redisLogger{}) })
	s := &shared{client: redis.NewClient(opts), replica: replicaName()}
	s.mon = redisgate.NewMonitor(s.client, time.Second, redisTimeout, func(degraded bool, err error) {
		if degraded {
			logger.Warn("outlast: redis is unreachable: this gateway's own gates and admission stand in, so replicas together may send more than the shared limits", "error", err)
			return
		}
		logger.Info("outlast: redis is back: gates and admission are shared again")
	})
	s.closers = append(s.closers, s.mon.Close)
	s.mon.Check(context.Background())
	gc.Gates = func(upstream string, slot bool, capacity, queue int) gateway.Gate {
		kind := "bound"
		if slot {
			kind = "slot"
		}
		g := redisgate.New(s.client, redisgate.Options{Capacity: capacity, MaxQueue: queue, Timeout: redisTimeout,
			Prefix: redisgate.DefaultPrefix + keyPart(upstream) + ":" + kind + ":"})
		s.closers = append(s.closers, g.Close)
		local := gate.New(capacity, queue)
		return &sharedGate{fb: &redisgate.Fallback{Shared: g, Local: local, Monitor: s.mon}, local: local}
	}
	gc.GateHealth = s.health
	for i := range gc.Upstreams {
		u := &gc.Upstreams[i]
		s.join(u.Name, u.URL, u.Admission)
		if len(u.Members) == 0 {
			continue
		}
		// A pool: its members' ledgers, and each member's admission.
		u.Share = redisgate.NewPoolShare(s.client, redisgate.PoolShareOptions{Prefix: redisgate.DefaultPoolPrefix + keyPart(u.Name) + ":",
			Timeout: redisTimeout, Monitor: s.mon})
		for _, m := range u.Members {
			s.join(m.Name, m.URL, m.Admission)
		}
	}
	return s, nil
}

// join shares a, the admission of the upstream or pool member name at u,
// through a Fleet of its own, if it has one.
func (s *shared) join(name string, u *url.URL, a *outlast.Admission) {
	if a == nil {
		return
	}
	if name == "" && u != nil {
		name = u.Host
	}
	f := redisgate.NewFleet(s.client, redisgate.FleetOptions{Prefix: redisgate.DefaultFleetPrefix + keyPart(name) + ":", MaxLimit: a.MaxLimit,
		Timeout: redisTimeout, Monitor: s.mon})
	f.Join(a)
	s.closers = append(s.closers, f.Close)
}

// health reports the shared backend for /outlast/health.
func (s *shared) health() gateway.GateHealth {
	h := gateway.GateHealth{Backend: "redis", State: "ok", Replica: s.replica}
	if s.mon.Degraded() {
		h.State = "degraded"
	}
	return h
}

// close stops what the shared state started, and closes the client.
func (s *shared) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.client.Close()
}

// sharedGate is an upstream's gate kept in Redis, with this process's own
// standing in while Redis cannot be reached.
type sharedGate struct {
	fb    *redisgate.Fallback
	local *gate.Gate
}

// Acquire takes a slot of key: the upstream's bound, "", or a named slot.
func (g *sharedGate) Acquire(ctx context.Context, key string, queued func(ahead int)) (func(), error) {
	return g.fb.Acquire(ctx, key, queued)
}

// Load reports key's load across the replicas, or this process's own while
// Redis cannot be reached.
func (g *sharedGate) Load(key string) (inFlight, waiting int) {
	ctx, cancel := context.WithTimeout(context.Background(), redisTimeout)
	defer cancel()
	return g.fb.Load(ctx, key, g.local.Load)
}

// Keys returns the keys this process's own gate has in use: while Redis
// is shared, the named slots of other replicas are not listed.
func (g *sharedGate) Keys() []string { return g.local.Keys() }

// keyPart makes an upstream's name safe in a Redis key's prefix, which
// must not hold a hash tag's braces.
func keyPart(name string) string {
	return strings.NewReplacer("{", "(", "}", ")").Replace(name)
}

// replicaName names this process among the gateways that share a Redis:
// its host and process ID.
func replicaName() string {
	host, _ := os.Hostname()
	return host + ":" + strconv.Itoa(os.Getpid())
}

// redactRedis hides a password in a Redis URL.
func redactRedis(url string) string {
	if i, j := strings.Index(url, "://"), strings.LastIndex(url, "@"); i >= 0 && j > i {
		return url[:i+3] + "…@" + url[j+1:]
	}
	return url
}

var _ outlast.Gate = (*sharedGate)(nil)
