// Redisgate measures what sharing a gate through Redis costs, next to the
// in-process gate, in one run: package redisgate's Gate against package
// gate's, on a Redis over loopback.
//
//  1. Uncontended: one goroutine acquires and releases one key of
//     capacity 1, --iterations times, with each gate; for redisgate it also
//     counts the commands sent (two round trips are expected), and times a
//     PING for scale.
//  2. Contended: --goroutines goroutines loop acquire, hold for --hold,
//     release, on one key of --capacity slots for --duration: for
//     redisgate spread over --processes child processes (the program run
//     again with a hidden --child flag), for the in-process gate in this
//     one, which it cannot leave. Each holder counts itself in and out of
//     a Redis counter (INCR, DECR) while it holds, and records its hold
//     on the wall clock; the most holders either way must not exceed the
//     capacity.
//  3. Hand-off: the time from a release to the next holder's Acquire
//     returning, with one waiter queued, --handoffs times: through the
//     in-process gate, through two redisgate Gates on two clients in this
//     process, and through a Gate in this process and one in a child.
//
// It prints three markdown tables (or JSON), and the checks: the capacity
// was never exceeded, every child reported, no Acquire failed. A failed
// check is a line on stderr and exit status 1; with --check, so is a
// redisgate hand-off p99 of --goal or more.
//
// It needs Redis 7 or later at --redis, by default $OUTLAST_TEST_REDIS or
// redis://127.0.0.1:6379/0, and uses keys under a prefix of its own that
// it deletes at the end.
//
// Usage:
//
//	cd bench && go run ./redisgate [flags]
//
// Run it with --help for the flags and their defaults.
package main

import (
	"os"

	"github.com/outlast-llm/outlast/bench/internal/cmdline"
)

func main() {
	if isChild(os.Args[1:]) {
		cmdline.Main("redisgate child", runChild)
	}
	cmdline.Main("redisgate", run)
}

// usageError is a bad command line: main exits 2 for it.
type usageError = cmdline.UsageError
