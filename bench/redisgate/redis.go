package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// dialTimeout bounds the first PING, which tells an unreachable Redis.
const dialTimeout = 3 * time.Second

// parseRedisURL returns the client options of --redis. Each call's context
// bounds its reads and writes, as package redisgate asks.
func parseRedisURL(url string) (*redis.Options, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		// The error names what is wrong; the URL may hold a password.
		return nil, usageError{Err: fmt.Errorf("--redis: %w", err)}
	}
	opts.ContextTimeoutEnabled = true
	return opts, nil
}

// dial returns a client of the Redis that opts name, with a pool of
// poolSize connections (0: go-redis's default), once it answers a PING.
func dial(ctx context.Context, opts *redis.Options, poolSize int) (*redis.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	// A connection of our own first: go-redis would log each of its
	// retries of a refused dial before it gave up.
	network := cmp.Or(opts.Network, "tcp")
	conn, err := new(net.Dialer).DialContext(ctx, network, opts.Addr)
	if err != nil {
		return nil, unreachable(opts, err)
	}
	conn.Close()
	o := *opts // NewClient fills in the defaults of what it is given
	if poolSize > 0 {
		o.PoolSize = poolSize
	}
	client := redis.NewClient(&o)
	if err := client.Ping(ctx).Err(); err != nil {
		client.Close()
		return nil, unreachable(opts, err)
	}
	return client, nil
}

func unreachable(opts *redis.Options, err error) error {
	return fmt.Errorf("redis at %s is unreachable: %w (start Redis 7 or later there, or name one with --redis or $%s)", opts.Addr, err, envRedis)
}

// serverVersion returns Redis's version, and an error if it is older than
// 7, which package redisgate needs.
func serverVersion(ctx context.Context, client *redis.Client) (string, error) {
	info, err := client.Info(ctx, "server").Result()
	if err != nil {
		return "", fmt.Errorf("redis INFO server: %w", err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:")
		if !ok {
			continue
		}
		major, _, _ := strings.Cut(v, ".")
		if n, err := strconv.Atoi(major); err != nil || n < 7 {
			return v, fmt.Errorf("redis %s: package redisgate needs 7.0 or later", v)
		}
		return v, nil
	}
	return "", errors.New("redis INFO server: no redis_version")
}

// newPrefix returns a Prefix that no other run uses, so that runs never
// share a key, and the cleanup deletes only this run's.
func newPrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "outlast:bench:" + hex.EncodeToString(b[:]) + ":"
}

// deletePrefix deletes every key under prefix. They would expire by
// themselves, three leases after their last use; this leaves nothing
// behind at once.
func deletePrefix(ctx context.Context, client *redis.Client, prefix string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil || len(keys) == 0 {
		return err
	}
	return client.Del(ctx, keys...).Err()
}

// commandCounter is a go-redis hook that counts the round trips a client
// makes, a pipeline as one, and each command by name.
type commandCounter struct {
	// mu guards the fields below: a hold's lease renewals run in
	// goroutines of their own.
	mu    sync.Mutex
	trips int
	names map[string]int
}

func (h *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds...)
		return next(ctx, cmds)
	}
}

func (h *commandCounter) count(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.trips++
	if h.names == nil {
		h.names = make(map[string]int)
	}
	for _, c := range cmds {
		h.names[strings.ToUpper(c.Name())]++
	}
}

// reset forgets what was counted.
func (h *commandCounter) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.trips, h.names = 0, nil
}

// perOp returns the round trips, and each command, per op of n.
func (h *commandCounter) perOp(n int) (trips float64, names map[string]float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	names = make(map[string]float64, len(h.names))
	for name, c := range h.names {
		names[name] = float64(c) / float64(n)
	}
	return float64(h.trips) / float64(n), names
}
