package redisgate

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outlast-llm/outlast"
)

// DefaultFleetPrefix begins the Redis keys and channel of a Fleet whose
// FleetOptions.Prefix is empty.
const DefaultFleetPrefix = "outlast:fleet:"

// FleetOptions configure a [Fleet].
type FleetOptions struct {
	// Prefix begins every Redis key and the channel of the Fleet. The
	// processes that front one upstream share a Prefix; give each
	// upstream its own. Empty means DefaultFleetPrefix. It must not
	// contain '{' or '}'.
	Prefix string

	// MaxLimit is the Admission's MaxLimit: the most requests in flight
	// across the fleet while a key recovers. Values below 1 mean
	// outlast.DefaultMaxLimit.
	MaxLimit int

	// Lease is how long the probe, and a place under the limit, outlive
	// the last sign of life from the process that holds it; each is
	// renewed every Lease/3 while held. Zero means DefaultLease.
	Lease time.Duration

	// Timeout bounds every call to Redis. Zero means DefaultTimeout.
	Timeout time.Duration

	// Monitor, if not nil, is told of Redis's failures and tells the
	// Fleet when to do without it (see [Monitor]). Nil means one of the
	// Fleet's own, which Close closes.
	Monitor *Monitor
}

// Fleet is an [outlast.Fleet] through Redis: the processes whose
// Admissions join Fleets with the same Redis and Prefix act as one
// Admission. Each key's state is a Redis hash, written by one script per
// change and announced on the Fleet's channel, from which every other
// process learns it ([outlast.Admission.Learn]); the probe is a key that
// one process holds at a time (SET NX with a lease, renewed while held);
// and the places under a recovering key's limit are a [Gate] whose
// capacity is lowered to the limit told last.
//
// The state is kept by rules that need no agreement beyond each script's
// atomicity: a not-before time only ever moves later; the state, its next
// probe and its limit are the last told. An announcement lost (Redis
// restarted, the subscription broken) leaves a process with an older view
// until the next one, or until its own requests find the upstream down
// or up; a process refused the probe learns the shared state in the same
// reply. While Redis cannot be reached, the Fleet lets its process act
// alone: it grants every probe and every place, and keeps the last state
// told of each key, which it writes once Redis answers again (or first
// thing when the process next asks for that key's probe), so that the
// shared state is this process's latest and not what it was when Redis
// went away.
//
// Use [NewFleet] and [Fleet.Join]. A Fleet is safe for concurrent use.
type Fleet struct {
	client  redis.UniversalClient
	prefix  string
	id      string
	lease   time.Duration
	timeout time.Duration
	send    *Gate
	mon     *Monitor
	ownMon  bool

	tellMu sync.Mutex // held while a state is taken from pending and written, so that a key's are written in order

	mu      sync.Mutex
	a       *outlast.Admission
	pending map[string]told // to write, by key: the last state wins
	kick    chan struct{}
	stop    chan struct{}
	wg      sync.WaitGroup
	closed  bool
}

// NewFleet returns a Fleet through client. It sends nothing to Redis until
// an Admission joins it.
func NewFleet(client redis.UniversalClient, opts FleetOptions) *Fleet {
	f := &Fleet{client: client, prefix: opts.Prefix, lease: opts.Lease, timeout: opts.Timeout, mon: opts.Monitor,
		pending: map[string]told{}, kick: make(chan struct{}, 1), stop: make(chan struct{})}
	if f.prefix == "" {
		f.prefix = DefaultFleetPrefix
	}
	if f.lease <= 0 {
		f.lease = DefaultLease
	}
	f.lease = max(f.lease, 30*time.Millisecond)
	if f.timeout <= 0 {
		f.timeout = DefaultTimeout
	}
	if f.mon == nil {
		f.mon, f.ownMon = NewMonitor(client, 0, f.timeout, nil), true
	}
	limit := opts.MaxLimit
	if limit < 1 {
		limit = outlast.DefaultMaxLimit
	}
	f.send = New(client, Options{Capacity: limit, MaxQueue: 1 << 20, Lease: f.lease, Timeout: f.timeout, Prefix: f.prefix + "send:"})
	f.id = newOwner()
	return f
}

// Join makes a share its keys' state through f: it sets a.Fleet, and
// starts the subscription through which a learns the other processes'
// changes and the goroutine that tells them a's. Call it once, before a
// is used.
func (f *Fleet) Join(a *outlast.Admission) {
	f.mu.Lock()
	f.a = a
	f.mu.Unlock()
	a.Fleet = f
	f.wg.Add(2)
	go f.listen()
	go f.teller()
}

// Close stops the Fleet's goroutines and waits for them. Probes and places
// held stay held until their lease runs out.
func (f *Fleet) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	close(f.stop)
	f.mu.Unlock()
	f.wg.Wait()
	f.send.Close()
	if f.ownMon {
		f.mon.Close()
	}
	return nil
}

func (f *Fleet) stateKey(key string) string { return f.prefix + hashTag(key) + ":s" }
func (f *Fleet) probeKey(key string) string { return f.prefix + hashTag(key) + ":p" }
func (f *Fleet) channel() string            { return f.prefix + "state" }

// Tell shares key's state: it is written and announced in the background,
// the last state told for a key replacing one not yet sent. While Redis
// cannot be reached the state is kept, and written once Redis answers
// again, or before this process next asks for key's probe: else the
// shared state would stay what it was when Redis went away, and a
// process that found the upstream down meanwhile would be refused the
// probe by a recovery long over.
func (f *Fleet) Tell(key string, s outlast.FleetState) {
	f.mu.Lock()
	t := f.pending[key]
	t.s = s // a probe's end not yet written stays, with the later state
	f.pending[key] = t
	f.mu.Unlock()
	f.wakeTeller()
}

// told is a state to write: one that Tell left, or the answer of a probe
// that owner held, whose end it is.
type told struct {
	s     outlast.FleetState
	owner string
}

func (f *Fleet) wakeTeller() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// teller sends what Tell left, one key at a time, and while Redis cannot
// be reached tries again every Timeout.
func (f *Fleet) teller() {
	defer f.wg.Done()
	var retry <-chan time.Time
	for {
		select {
		case <-f.stop:
			return
		case <-f.kick:
		case <-retry:
		}
		retry = nil
		for {
			select {
			case <-f.stop:
				return
			default:
			}
			if found, ok := f.tellPending("", true); !found || !ok {
				break // all written, or not now: the retry tries again
			}
		}
		f.mu.Lock()
		left := len(f.pending) > 0
		f.mu.Unlock()
		if left {
			retry = time.After(f.timeout)
		}
	}
}

// tellPending writes a state left to write: key's, or any key's if
// anyKey. It reports whether there was one, and whether it was written.
// One that was not, because Redis cannot be reached or the write failed,
// is kept for the next try, under a later state told meanwhile if there
// is one (which then ends the probe it ended).
func (f *Fleet) tellPending(key string, anyKey bool) (found, ok bool) {
	f.tellMu.Lock()
	defer f.tellMu.Unlock()
	f.mu.Lock()
	if f.mon.Degraded() {
		if anyKey {
			found = len(f.pending) > 0
		} else {
			_, found = f.pending[key]
		}
		f.mu.Unlock()
		return found, false
	}
	t, found := f.pending[key]
	if anyKey {
		for k, v := range f.pending {
			key, t, found = k, v, true
			break
		}
	}
	delete(f.pending, key)
	f.mu.Unlock()
	if !found {
		return false, false
	}
	script := tellScript
	if t.owner != "" {
		script = probeDoneScript
	}
	if f.write(script, key, t.s, t.owner) {
		return true, true
	}
	f.mu.Lock()
	if later, ok := f.pending[key]; ok {
		later.owner = cmp.Or(later.owner, t.owner)
		t = later
	}
	f.pending[key] = t
	f.mu.Unlock()
	return true, false
}

// write runs a script that merges s into key's shared state and
// announces it: tell, or the end of a probe that owner held. It reports
// whether the state was written.
func (f *Fleet) write(script *redis.Script, key string, s outlast.FleetState, owner string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	err := script.Run(ctx, f.client, []string{f.stateKey(key), f.probeKey(key)},
		int(s.State), ms(s.NextProbe), ms(s.NotBefore), s.Limit, f.id, (10 * time.Minute).Milliseconds(), f.channel(), key, owner).Err()
	if err != nil {
		f.mon.fail(err)
		return false
	}
	limit := 0
	if s.State == outlast.Recovering {
		limit = max(s.Limit, 1)
	}
	if err := f.send.setCap(ctx, key, limit); err != nil {
		f.mon.fail(err)
	}
	return true
}

// Probe takes key's probe for this process, if no other holds it and the
// key is not recovering, and renews it while held. A process refused
// learns the shared state at once: one whose view is older than another's
// probe's answer learns that the key recovers, and sends under the
// fleet's limit instead of probing again.
func (f *Fleet) Probe(key string) (func(outlast.FleetState), bool) {
	if f.mon.Degraded() {
		return func(outlast.FleetState) {}, true // alone
	}
	// What this process told of key and Redis has not yet heard (its own
	// finding that the upstream is down, say) goes first: the script
	// judges by the shared state.
	if found, ok := f.tellPending(key, false); found && !ok {
		f.wakeTeller()                           // kept: the teller tries again
		return func(outlast.FleetState) {}, true // alone
	}
	owner := f.id + ":" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	v, err := probeScript.Run(ctx, f.client, []string{f.stateKey(key), f.probeKey(key)}, owner, f.lease.Milliseconds(), int(outlast.Recovering)).Int64Slice()
	cancel()
	if err != nil {
		f.mon.fail(err)
		return func(outlast.FleetState) {}, true // alone
	}
	if len(v) == 5 && v[0] == 0 {
		if a := f.admission(); a != nil {
			a.Learn(key, outlast.FleetState{State: outlast.UpstreamState(v[1]), NextProbe: fromMS(v[2]), NotBefore: fromMS(v[3]), Limit: int(v[4])})
		}
		return nil, false
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go f.renewProbe(key, owner, stop, stopped)
	var once sync.Once
	return func(s outlast.FleetState) {
		once.Do(func() {
			close(stop)
			<-stopped
			// The answer replaces what was told before it, and is
			// written with the probe's end at once, or, while Redis
			// cannot be reached, by the teller once it can.
			f.mu.Lock()
			f.pending[key] = told{s: s, owner: owner}
			f.mu.Unlock()
			if _, ok := f.tellPending(key, false); !ok {
				f.wakeTeller()
			}
		})
	}, true
}

// renewProbe extends owner's hold on key's probe every Lease/3 until
// stop, the Fleet's Close, or Redis says the hold was lost.
func (f *Fleet) renewProbe(key, owner string, stop, stopped chan struct{}) {
	defer close(stopped)
	t := time.NewTicker(f.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-f.stop:
			return // held until its lease runs out, as Close says
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
		held, err := renewProbeScript.Run(ctx, f.client, []string{f.probeKey(key)}, owner, f.lease.Milliseconds()).Int()
		cancel()
		if err == nil && held == 0 {
			return // lapsed: another process may hold it now
		}
	}
}

// Send waits for a place under key's limit across the fleet.
func (f *Fleet) Send(ctx context.Context, key string, limit int) (func(), error) {
	if f.mon.Degraded() {
		return func() {}, nil
	}
	release, err := f.send.Acquire(ctx, key, nil)
	if err != nil {
		if errors.Is(err, ErrUnavailable) {
			f.mon.fail(err)
			return func() {}, nil // alone
		}
		return nil, err
	}
	return release, nil
}

func (f *Fleet) admission() *outlast.Admission {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.a
}

// listen learns the other processes' announcements. go-redis remakes a
// broken subscription; what was announced meanwhile is lost.
func (f *Fleet) listen() {
	defer f.wg.Done()
	ps := f.client.Subscribe(context.Background(), f.channel())
	defer ps.Close()
	ch := ps.Channel()
	for {
		select {
		case <-f.stop:
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			key, s, by, ok := parseAnnouncement(m.Payload)
			if !ok || by == f.id {
				continue
			}
			if a := f.admission(); a != nil {
				a.Learn(key, s)
			}
		}
	}
}

// parseAnnouncement reads a payload of tellScript's: state, next probe,
// not-before (ms), limit, the teller's id and the key, separated by
// '\x1f'; the key is last, so that it may hold anything.
func parseAnnouncement(p string) (key string, s outlast.FleetState, by string, ok bool) {
	f := strings.SplitN(p, "\x1f", 6)
	if len(f) != 6 {
		return "", s, "", false
	}
	var n [4]int64
	for i := range n {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return "", s, "", false
		}
		n[i] = v
	}
	if n[0] < 0 || n[0] > int64(outlast.Recovering) {
		return "", s, "", false
	}
	s = outlast.FleetState{State: outlast.UpstreamState(n[0]), NextProbe: fromMS(n[1]), NotBefore: fromMS(n[2]), Limit: int(n[3])}
	return f[5], s, f[4], true
}

// ms is t in ms since the epoch, 0 for the zero time.
func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMS(v int64) time.Time {
	if v <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(v)
}

// merge merges a told state (ARGV[1..5]: state, next probe, not-before,
// limit, teller) into the hash KEYS[1]: the not-before time only moves
// later, the rest is the last told. It expires after ARGV[6] ms, and is
// announced on ARGV[7] for key ARGV[8].
const merge = `
local S = KEYS[1]
local nb = tonumber(ARGV[3])
local old = tonumber(redis.call('HGET', S, 'nb') or '0')
if old > nb then nb = old end
redis.call('HSET', S, 'st', ARGV[1], 'np', ARGV[2], 'nb', nb, 'lim', ARGV[4])
redis.call('PEXPIRE', S, tonumber(ARGV[6]))
redis.call('PUBLISH', ARGV[7], table.concat({ARGV[1], ARGV[2], nb, ARGV[4], ARGV[5], ARGV[8]}, '\31'))
`

// tellScript merges and announces a process's change.
var tellScript = redis.NewScript(merge + `return 1`)

// probeDoneScript ends the probe that ARGV[9] holds (KEYS[2]), if it still
// does, and merges and announces the state its answer led to, in one
// step: no other process can take the probe before the state is told.
var probeDoneScript = redis.NewScript(`
if redis.call('GET', KEYS[2]) == ARGV[9] then
  redis.call('DEL', KEYS[2])
end
` + merge + `return 1`)

// probeScript takes the probe (KEYS[2]) for ARGV[1] for ARGV[2] ms if no
// one holds it and the state (KEYS[1]) is not ARGV[3], recovering: {1};
// else it replies {0, state, next probe, not-before, limit} from KEYS[1].
// A recovering state is a probe answered since the asking process last
// learned the state, or it would not ask: its probe would be a second
// request outside the fleet's limit.
var probeScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'st') ~= ARGV[3] and redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', tonumber(ARGV[2])) then
  return {1}
end
local v = redis.call('HMGET', KEYS[1], 'st', 'np', 'nb', 'lim')
return {0, tonumber(v[1] or '1'), tonumber(v[2] or '0'), tonumber(v[3] or '0'), tonumber(v[4] or '0')}
`)

// renewProbeScript extends ARGV[1]'s hold on the probe by ARGV[2] ms, if
// it still holds it.
var renewProbeScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
end
return 0
`)
