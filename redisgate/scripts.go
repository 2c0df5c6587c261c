package redisgate

import "github.com/redis/go-redis/v9"

// The replies of acquire and renew are {state, n}, n the number ahead of a
// waiter.
const (
	stateGone   = 0 // neither holding nor waiting: refused busy, or reaped
	stateHeld   = 1 // holds a slot
	stateQueued = 2 // waits in the queue
)

// keys names the Redis keys of one gate key. They share the hash tag {key},
// so that they live in one Redis Cluster slot, as a script's keys must.
type keys struct {
	key   string    // the gate key, for errors
	redis [5]string // KEYS[1..5] of every script: tickets, holders, queue, heartbeats, and a lower capacity, if set
}

// keys returns key's Redis keys.
func (g *Gate) keys(key string) keys {
	base := g.prefix + hashTag(key)
	return keys{key: key, redis: [5]string{base + ":t", base + ":h", base + ":q", base + ":e", base + ":c"}}
}

// emptyTag stands for the empty key in a hash tag. An empty tag, {}, is
// none: a Redis Cluster would hash each Redis key's whole name, and put a
// script's keys in different slots. "bound" is what the gateway, which
// gives its upstreams' bounds the key "", named them before the mapping
// moved here, so that replicas of both versions share them.
const emptyTag = "bound"

// hashTag returns the hash tag of key's Redis keys: {key}, and {bound}
// for "". The gate key "bound" is then the same as "".
func hashTag(key string) string {
	if key == "" {
		key = emptyTag
	}
	return "{" + key + "}"
}

// prologue starts every script. It reads the clock from Redis, never from a
// client, so that the leases of all processes are measured on one clock.
// Scripts that call TIME and then write are replicated by their effects,
// which is the only mode of Redis 7.
//
// settle reaps what has expired, then grants every free slot to the queue's
// head, in ticket order. Each grant is published on its owner's channel
// (wake .. owner) with the member as payload: the owner is the part of the
// member before its first ':'. A grant gives a full lease from now, so that
// the waiter has the time to see it and start renewing.
//
// capOf lowers the capacity to the one a Fleet set for the key (C), if
// it set one: the limit of a recovering upstream, the same for every
// process.
//
// touch sets the idle expiry of the key's structures, so that nothing is
// left behind once every process has gone: an empty ZSET is deleted by
// Redis, and the ticket counter lapses ttl after the last operation that
// touched it. Tickets restarting from 1 then is harmless: they only order
// the waiters present, and there are none.
const prologue = `
local T, H, Q, E, C = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)

local function capOf(cap)
  local c = redis.call('GET', C)
  if c then
    return math.min(cap, tonumber(c))
  end
  return cap
end

local function settle(cap, lease, wake)
  cap = capOf(cap)
  redis.call('ZREMRANGEBYSCORE', H, '-inf', now)
  local dead = redis.call('ZRANGEBYSCORE', E, '-inf', now)
  if #dead > 0 then
    for _, m in ipairs(dead) do
      redis.call('ZREM', Q, m)
    end
    redis.call('ZREMRANGEBYSCORE', E, '-inf', now)
  end
  local free = cap - redis.call('ZCARD', H)
  while free > 0 do
    local head = redis.call('ZPOPMIN', Q)
    if #head == 0 then
      break
    end
    local m = head[1]
    redis.call('ZREM', E, m)
    redis.call('ZADD', H, now + lease, m)
    redis.call('PUBLISH', wake .. string.match(m, '^[^:]*'), m)
    free = free - 1
  end
end

local function touch(from, ttl)
  for i = from, 4 do
    redis.call('PEXPIRE', KEYS[i], ttl)
  end
end
`

// acquireScript takes a slot for member ARGV[1] if one is free and nobody
// waits, or else queues it behind the others if there is room. Its reply's
// n is the number ahead of a queued member: holders and earlier waiters.
//
// It is idempotent, so that a client that sends it again after a lost
// reply (go-redis retries on a broken connection) does not take a second
// place: a member already holding or queued keeps what it has.
//
// ARGV: member, capacity, max queue, lease ms, ttl ms, wake channel prefix.
var acquireScript = redis.NewScript(prologue + `
local id, cap, maxq, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
settle(cap, lease, ARGV[6])
local state, n = 0, 0
if redis.call('ZSCORE', H, id) then
  state = 1
else
  local rank = redis.call('ZRANK', Q, id)
  local held, waiting = redis.call('ZCARD', H), redis.call('ZCARD', Q)
  if rank then
    state, n = 2, held + rank
  elseif waiting == 0 and held < capOf(cap) then
    redis.call('ZADD', H, now + lease, id)
    state = 1
  elseif waiting < maxq then
    redis.call('ZADD', Q, redis.call('INCR', T), id)
    redis.call('ZADD', E, now + lease, id)
    state, n = 2, held + waiting
  end
end
touch(1, ARGV[5])
return {state, n}
`)

// leaveScript ends member ARGV[1]'s hold or wait, whichever it has, and
// passes a freed slot on to the queue's head. It serves release and a
// waiter's cancellation alike, so that a grant that raced the cancellation
// is given on rather than lost. Its reply is 1 if the member was there.
//
// ARGV: member, capacity, lease ms, ttl ms, wake channel prefix.
var leaveScript = redis.NewScript(prologue + `
local id = ARGV[1]
local n = redis.call('ZREM', H, id) + redis.call('ZREM', Q, id)
redis.call('ZREM', E, id)
settle(tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[5])
touch(1, ARGV[4])
return n
`)

// renewScript extends member ARGV[1]'s lease, if it holds a slot, or its
// heartbeat, if it waits, by a lease from now. It is a holder's renewal and
// a waiter's heartbeat and re-check at once: a waiter learns from its reply
// whether it was granted a slot, even if the grant's message was lost. A
// member that Redis has reaped is not brought back.
//
// ARGV: member, capacity, lease ms, ttl ms, wake channel prefix.
var renewScript = redis.NewScript(prologue + `
local id, lease = ARGV[1], tonumber(ARGV[3])
settle(tonumber(ARGV[2]), lease, ARGV[5])
touch(1, ARGV[4])
if redis.call('ZSCORE', H, id) then
  redis.call('ZADD', H, 'XX', now + lease, id)
  return {1, 0}
end
local rank = redis.call('ZRANK', Q, id)
if rank then
  redis.call('ZADD', E, 'XX', now + lease, id)
  return {2, redis.call('ZCARD', H) + rank}
end
return {0, 0}
`)

// loadScript settles the key and reports its holders and waiters. It does
// not touch the ticket counter, so that a health check polling an idle key
// does not keep it alive.
//
// ARGV: capacity, lease ms, ttl ms, wake channel prefix.
var loadScript = redis.NewScript(prologue + `
settle(tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[4])
touch(2, ARGV[3])
return {redis.call('ZCARD', H), redis.call('ZCARD', Q)}
`)

// capScript sets the key's lower capacity (C) to ARGV[1], for ttl, or
// removes it if ARGV[1] is 0, and grants what that frees.
//
// ARGV: lower capacity, capacity, lease ms, ttl ms, wake channel prefix.
var capScript = redis.NewScript(prologue + `
local c = tonumber(ARGV[1])
if c > 0 then
  redis.call('SET', C, c, 'PX', tonumber(ARGV[4]))
else
  redis.call('DEL', C)
end
settle(tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[5])
return {0, 0}
`)
