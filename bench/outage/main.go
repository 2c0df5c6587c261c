// Outage measures whether retries outlast a provider's outage: it runs a
// fake provider through an outage in virtual time (testing/synctest), loads
// it with requests from many client processes, and compares outlast with
// the libraries users would pick instead, each running its own code, and
// with the physical limit. It prints a markdown table (or JSON) and writes
// an SVG chart of attempts per second.
//
// Usage:
//
//	cd bench && go run ./outage [flags]
//
// Run it with --help for the flags and their defaults; docs/outage.md has
// the results and what they mean.
package main

import (
	"github.com/outlast-llm/outlast/bench/internal/cmdline"
)

func main() {
	cmdline.Main("outage", run)
}

// usageError is a bad command line: main exits 2 for it.
type usageError = cmdline.UsageError
