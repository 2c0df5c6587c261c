// Load measures the latency the outlast gateway adds to a request, next to
// what a bare httputil.ReverseProxy adds, over one fast in-process fake
// upstream on loopback.
//
// It drives five targets, interleaved in one run so that drift on a noisy
// machine falls on all of them alike: the upstream directly, a bare
// ReverseProxy, the gateway, the gateway with its slot gate on, and the
// gateway with its SQLite journal (written by a child process at nice 19,
// as outlast serve does, or in-process with --journal-child=false). It
// reports each proxy's added latency (its percentile minus the direct one)
// at p50 and p99, sequentially and at a fixed open-loop rate, for whole
// responses and for the first byte of event streams, and the highest rate
// each target sustains. The ratio column, gateway added over proxy added,
// is the number to judge: absolute times on a shared machine are noisy.
//
// With --deployed, each target runs as users run it, in a process of its
// own and from a file of its own: the upstream and the bare proxy as
// children of this program, each gateway as outlast serve built from this
// module (see deployed.go). The
// README's table comes from that mode. --serve-args adds a gateway target
// with flags of one's own, compared with the plain gateway.
//
// Usage:
//
//	cd bench && go run ./load [flags]
//
// Run it with --help for the flags and their defaults.
package main

import (
	"github.com/outlast-llm/outlast/bench/internal/cmdline"
	"github.com/outlast-llm/outlast/server"
)

func main() {
	server.RunJournalWriter()
	runChild()
	cmdline.Main("load", run)
}

// usageError is a bad command line: main exits 2 for it.
type usageError = cmdline.UsageError
