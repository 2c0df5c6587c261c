// Soak runs thousands of concurrent callers through the outlast gateway,
// as outlast serve assembles it (server.New, with a SQLite journal), to a
// fake upstream that fails a fifth of the attempts in six ways, first
// with one slot and then with four, and checks what must hold however
// long it runs:
//
//   - the upstream never sees more requests in flight than the slots;
//   - every request gets exactly one well-formed, complete answer: the
//     completion of its own last attempt, whole, as JSON or as a stream
//     that ends as OpenAI's streams end, or the upstream's failure after
//     the last retry, or a well-formed gateway error;
//   - the attempts the upstream saw are the journal's, which are the sum
//     of the Outlast-Attempts headers, request by request;
//   - waiters for the gate are served in the order they queued;
//   - busy (503, Outlast-Error: busy) comes only when the queue is full;
//   - goroutines, heap and open files are back to where they were once
//     the gateway is closed.
//
// It reports each phase's throughput, the p50 and p99 of gate wait and of
// end-to-end time, and the peak RSS, as a markdown table (or JSON), and
// with --doc writes that table into the soak section of a markdown file.
// A failed check is one line on stderr, and the exit status is 1.
//
// No check reads a clock. The order the gate grants in is read where it
// is certain: at the upstream, which with one slot sees the attempts in
// the order they were granted, and, with more slots, in probes that hold
// every slot at the upstream and free one at a time, so that each grant
// is the next arrival. Which of two attempts joined the queue first is
// known only when one's Queued hook ran before the other was sent, on a
// counter that both read; pairs without that evidence are not judged.
// Busy is judged in the probes too, while every slot is held and the
// queue can only grow: a refusal then, with the queue shorter than its
// bound when the caller looks, is one that came before the queue was
// full.
//
// The 2,000 callers hold 2,000 connections to the gateway, which holds as
// many from its side: the callers' transport keeps an idle connection per
// caller (MaxIdleConnsPerHost), so that none is opened per request, and
// the run raises its soft RLIMIT_NOFILE to what it needs (Go already
// raises it to the hard limit at start) or refuses to start, naming the
// limit.
//
// Usage:
//
//	cd bench && go run ./soak [flags]
//
// Run it with --help for the flags and their defaults.
package main

import (
	"github.com/outlast-llm/outlast/bench/internal/cmdline"
)

func main() {
	cmdline.Main("soak", run)
}

// usageError is a bad command line: main exits 2 for it.
type usageError = cmdline.UsageError
