package redisgate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outlast-llm/outlast"
)

// DefaultPoolPrefix begins the Redis keys of a PoolShare whose
// PoolShareOptions.Prefix is empty.
const DefaultPoolPrefix = "outlast:pool:"

// PoolShareOptions configure a [PoolShare].
type PoolShareOptions struct {
	// Prefix begins every Redis key of the PoolShare. The processes that
	// send to the same members share a Prefix. Empty means
	// DefaultPoolPrefix. It must not contain '{' or '}'.
	Prefix string

	// Timeout bounds every call to Redis. Zero means DefaultTimeout.
	Timeout time.Duration

	// Monitor, if not nil, is told of Redis's failures and tells the
	// PoolShare when to do without it. Nil means one of the PoolShare's
	// own, which Close closes.
	Monitor *Monitor
}

// PoolShare is an [outlast.PoolShare] in Redis: the outlast.Pools of
// several processes whose Share is a PoolShare with the same Redis and
// Prefix spend each member's rate limits once. Each member's ledger is a
// Redis hash, counted as outlast.Pool counts its own: what the latest
// answer's headers said was left, less what was taken since, refilled at
// the limit a minute unless the reset rules that out. Take and Count are
// each one script, on Redis's clock, so that two processes never both
// take the last of a limit; the attempts taken are a sorted set by time,
// which an answer's count trims. While Redis cannot be reached, Take and
// Count fail at once and each Pool goes on with its own ledger.
//
// Use [NewPoolShare]. A PoolShare is safe for concurrent use.
type PoolShare struct {
	client  redis.UniversalClient
	prefix  string
	timeout time.Duration
	mon     *Monitor
	ownMon  bool
}

// NewPoolShare returns a PoolShare that keeps its ledgers through client.
func NewPoolShare(client redis.UniversalClient, opts PoolShareOptions) *PoolShare {
	s := &PoolShare{client: client, prefix: opts.Prefix, timeout: opts.Timeout, mon: opts.Monitor}
	if s.prefix == "" {
		s.prefix = DefaultPoolPrefix
	}
	if s.timeout <= 0 {
		s.timeout = DefaultTimeout
	}
	if s.mon == nil {
		s.mon, s.ownMon = NewMonitor(client, 0, s.timeout, nil), true
	}
	return s
}

// Close closes the PoolShare's own Monitor, if it made one.
func (s *PoolShare) Close() error {
	if s.ownMon {
		return s.mon.Close()
	}
	return nil
}

// errDegraded is Take's and Count's error while Redis cannot be reached.
var errDegraded = errors.New("redisgate: redis is unreachable: the pool counts alone")

// poolWindow is the window over which a limit is taken to refill when its
// reset does not rule it out, as outlast.Pool takes it.
const poolWindow = time.Minute

// poolReorder is how long before another an attempt may be taken and
// still reach its member after it, as outlast.Pool allows.
const poolReorder = 250 * time.Millisecond

// poolTTL is how long a member's ledger outlives its last use, and the
// longest an attempt's answer may take to be counted.
const poolTTL = time.Hour

// poolKeys returns the Redis keys of member, in one hash slot: its
// ledger, its attempts taken (a sorted set by time), the counter of their
// ids, and for those answered, the last id taken by then.
func (s *PoolShare) poolKeys(member string) []string {
	base := s.prefix + hashTag(member)
	return []string{base + ":l", base + ":s", base + ":n", base + ":d"}
}

// Take counts an attempt of tokens at member if the shared ledger has
// room, as outlast.PoolShare says.
func (s *PoolShare) Take(ctx context.Context, member string, tokens float64) (string, time.Duration, error) {
	if s.mon.Degraded() {
		return "", 0, errDegraded
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	res, err := takeScript.Run(ctx, s.client, s.poolKeys(member), strconv.FormatFloat(tokens, 'f', -1, 64),
		poolWindow.Milliseconds(), poolTTL.Milliseconds()).Slice()
	if err != nil {
		if ctx.Err() == nil || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			s.mon.fail(err)
		}
		return "", 0, err
	}
	if len(res) != 2 {
		return "", 0, fmt.Errorf("redisgate: pool take: unexpected reply %v", res)
	}
	id, _ := res[0].(string)
	wait, _ := res[1].(int64)
	return id, time.Duration(wait) * time.Millisecond, nil
}

// Count counts member's limits afresh from h, the headroom the answer to
// attempt id states, as outlast.PoolShare says.
func (s *PoolShare) Count(ctx context.Context, member, id string, h outlast.Headroom) error {
	if s.mon.Degraded() {
		return errDegraded
	}
	now := time.Now()
	args := []any{id, poolReorder.Milliseconds(), poolWindow.Milliseconds(), poolTTL.Milliseconds()}
	tokens := h.Tokens
	if !tokens.Known() {
		tokens = h.InputTokens
	}
	for _, q := range []outlast.Quota{h.Requests, tokens} {
		known, resetIn := 0, int64(-1)
		if q.Known() {
			known = 1
		}
		if !q.Reset.IsZero() {
			resetIn = max(q.Reset.Sub(now).Milliseconds(), 0)
		}
		args = append(args, known, q.Limit, q.Remaining, resetIn)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := countScript.Run(ctx, s.client, s.poolKeys(member), args...).Err(); err != nil {
		if ctx.Err() == nil || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			s.mon.fail(err)
		}
		return err
	}
	return nil
}

// ledgerLua reads and writes one limit of a ledger hash (KEYS[1]), kind
// "q" for requests and "t" for tokens, each field the kind's letter and
// one of its own: k known ("1"), l limit (-1 unknown), v left as of a, a
// when (ms), r refill a ms (0 unknown), z the reset (ms, 0 none).
//
// avail returns what is left of kind at now, as outlast.Pool's ledger
// counts it, with its limit, rate and reset; nil when it is not known or
// whole by an amount not known.
const ledgerLua = `
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
local function num(f) return tonumber(redis.call('HGET', KEYS[1], f) or '0') end
local function avail(kind)
  if redis.call('HGET', KEYS[1], kind .. 'k') ~= '1' then return nil end
  local limit, left, at, rate, reset = num(kind .. 'l'), num(kind .. 'v'), num(kind .. 'a'), num(kind .. 'r'), num(kind .. 'z')
  if rate > 0 then
    local v = left + rate * (now - at)
    if limit >= 0 then v = math.min(v, math.max(limit, left)) end
    return v, limit, rate, reset
  end
  if reset > 0 and now >= reset then return nil end
  return left, limit, rate, reset
end
local function f(v) return string.format('%.17g', v) end
local function idOf(m) return tonumber(string.match(m, '^(%d+):')) end
-- drop removes the attempts taken before at from the set, and their answers' marks.
local function drop(at)
  local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. at)
  if #old > 0 then
    redis.call('HDEL', KEYS[4], unpack(old))
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. at)
  end
end
`

// takeScript takes an attempt of ARGV[1] tokens if the ledger has a
// request and the tokens left (or, for more than the whole limit, the
// whole limit), and returns {id, 0}; else {"", ms until it may}. The id
// names the attempt in the sorted set of attempts taken (KEYS[2], scored
// by time): its number, from KEYS[3], and its tokens; attempts a window
// old leave the set, counted by an answer or never to be. ARGV[2] is the
// window, ARGV[3] how long the keys live unused.
var takeScript = redis.NewScript(ledgerLua + `
local need = tonumber(ARGV[1])
local ttl = tonumber(ARGV[3])
local wait, vals = 0, {}
for _, kind in ipairs({'q', 't'}) do
  local n = 1
  if kind == 't' then n = need end
  local v, limit, rate, reset = avail(kind)
  if v ~= nil then
    local m = n
    if limit >= 0 and m > limit then m = limit end
    if v < m then
      local w = 1000
      if rate > 0 then w = math.ceil((m - v) / rate)
      elseif reset > now then w = reset - now end
      wait = math.max(wait, w)
    end
    vals[kind] = v - n
  end
end
if wait > 0 then return {'', wait} end
for kind, v in pairs(vals) do
  redis.call('HSET', KEYS[1], kind .. 'v', f(v), kind .. 'a', now)
end
local id = redis.call('INCR', KEYS[3]) .. ':' .. ARGV[1]
redis.call('ZADD', KEYS[2], now, id)
drop(now - tonumber(ARGV[2]))
for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ttl) end
return {id, 0}
`)

// countScript counts the ledger afresh from an answer to attempt ARGV[1]:
// ARGV[2] the reorder window, ARGV[3] the window, ARGV[4] the keys'
// lifetime, then for requests and tokens: known (0 or 1), limit,
// remaining, and the reset in ms from now (-1 for none). An attempt
// forgotten, or taken no later than the one whose answer counted last,
// counts nothing. The attempts taken after it, and those taken within the
// reorder window before it and not answered before it was taken, are
// still counted against what its headers say is left, as outlast.Pool
// counts its own.
var countScript = redis.NewScript(ledgerLua + `
local id = ARGV[1]
local sent = tonumber(redis.call('ZSCORE', KEYS[2], id))
if not sent then return 0 end
local n = idOf(id)
-- Marked answered, with the last attempt taken by then.
redis.call('HSET', KEYS[4], id, redis.call('GET', KEYS[3]) or '0')
if n <= num('applied') then return 0 end
local reorder, window, ttl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local pq, pt = 0, 0
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], sent - reorder, '+inf')) do
  local k = idOf(m)
  local uncounted = k > n
  if k < n then
    local done = redis.call('HGET', KEYS[4], m)
    uncounted = (not done) or tonumber(done) >= n
  end
  if uncounted then
    pq = pq + 1
    pt = pt + tonumber(string.match(m, ':(.+)$'))
  end
end
drop(sent - reorder)
for i, kind in ipairs({'q', 't'}) do
  local b = 4 + (i - 1) * 4
  if ARGV[b + 1] == '1' then
    local limit, remaining, resetIn = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
    local pend = pq
    if kind == 't' then pend = pt end
    local rate, reset = 0, 0
    if resetIn >= 0 then reset = now + resetIn else reset = now + window end
    if limit > 0 then
      rate = limit / window
      if resetIn > 0 and remaining < limit then
        rate = math.min(math.max(rate, (limit - remaining - 1) / resetIn), (limit - remaining) / resetIn)
      end
    end
    redis.call('HSET', KEYS[1], kind .. 'k', '1', kind .. 'l', limit, kind .. 'v', f(remaining - pend),
      kind .. 'a', now, kind .. 'r', f(rate), kind .. 'z', reset)
  end
end
redis.call('HSET', KEYS[1], 'applied', n)
for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ttl) end
return 1
`)
