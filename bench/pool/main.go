// Pool measures how outlast.Pool routes requests across a pool of
// rate-limited members, against the routers users would pick instead. It
// runs three fake API keys, each enforcing OpenAI-style requests-per-minute
// and tokens-per-minute limits as continuously refilling token buckets, in
// virtual time (testing/synctest), and offers each policy the same seeded
// open-loop Poisson workload, whose rate rises in steps from 50 % of the
// pool's capacity to 150 % and back. It prints, per policy and per load
// level, the 429s the members answered, the throughput, the share of
// requests served within their deadline, and the latency of those served.
//
// Usage:
//
//	cd bench && go run ./pool [flags]
//
// Run it with --help for the flags and their defaults.
package main

import (
	"github.com/outlast-llm/outlast/bench/internal/cmdline"
)

// main runs the program with the process's arguments and exits with its
// status: 0, 1 for a failed run or check, 2 for a bad command line.
func main() {
	cmdline.Main("pool", run)
}

// usageError is a bad command line: main exits 2 for it.
type usageError = cmdline.UsageError
