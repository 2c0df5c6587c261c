// Package bubble runs a benchmark's simulations in synctest bubbles, where
// time is virtual: a simulated minute passes as soon as every goroutine in
// the bubble is blocked, from a program as well as from a test.
package bubble

import (
	"flag"
	"sync"
	"testing"
	"testing/synctest"
)

// A Bubbler runs functions inside synctest bubbles. synctest.Test needs a
// *testing.T, so a program outside `go test` first becomes a test binary
// of one test (see InTest); tests use For with their own T.
type Bubbler struct {
	t *testing.T
}

// For returns the Bubbler of a test.
func For(t *testing.T) Bubbler { return Bubbler{t} }

// Run runs f in a bubble of its own and waits for the bubble to end. It may
// be called from many goroutines at once: each call is its own bubble.
func (b Bubbler) Run(f func()) {
	b.t.Helper()
	synctest.Test(b.t, func(*testing.T) { f() })
}

// InTest calls f with a Bubbler from inside the one test, named name, of a
// test binary run by testing.Main, and returns what f returns.
//
// testing.Main never returns: it exits the process when its tests are done.
// So it runs in a goroutine of its own, and its test hands f's result back
// and then blocks, leaving the process to the caller, which exits through
// main as usual. testing.Main parses the command line's flags when they are
// not yet parsed; the program parses its own with a FlagSet of its own, so
// the command line is marked parsed first, with no testing flags set (no
// -test.v: the binary prints nothing of its own). A test that fails, for a
// bubble that deadlocked say, makes testing.Main print the failure and exit 1.
func InTest[R any](name string, f func(Bubbler) R) R {
	prepare.Do(func() {
		testing.Init()
		_ = flag.CommandLine.Parse(nil)
	})
	out := make(chan R, 1)
	tests := []testing.InternalTest{{
		Name: name,
		F: func(t *testing.T) {
			out <- f(Bubbler{t})
			select {} // the caller exits the process
		},
	}}
	matchAll := func(string, string) (bool, error) { return true, nil }
	go testing.Main(matchAll, tests, nil, nil)
	return <-out
}

// prepare makes testing's flags parsed once per process.
var prepare sync.Once
