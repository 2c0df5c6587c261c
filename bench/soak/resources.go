package main

import (
	"fmt"
	"net"
	"runtime"
	"time"
)

// usage is what the process holds at one moment.
type usage struct {
	Goroutines int    `json:"goroutines"`
	Heap       uint64 `json:"heap_bytes"` // live heap after two collections
	Files      int    `json:"open_files"` // -1: the platform cannot tell
}

// The tolerances of the resources check: what a phase may leave behind
// once it is closed. A few goroutines and files are the runtime's and the
// standard library's, started or opened once for the process (the
// netpoller's are opened before the baseline, by warmUp). The heap keeps
// what outlives a phase by design: the runtime keeps every goroutine's
// descriptor for reuse, and each caller brings about five goroutines (its
// own, its connection's two, the gateway's for the connection and for its
// request), about 2 KiB of descriptors, measured. A leak of a phase's
// requests would leave far more: tens of MiB.
const (
	goroutineSlack = 4
	heapSlack      = 8 << 20 // and heapPerCaller per caller
	heapPerCaller  = 4 << 10
	fileSlack      = 4
)

// measure returns the process's usage now.
func measure() usage {
	// Two collections: the first frees what sync.Pools' victims held,
	// the second what it let go.
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return usage{Goroutines: runtime.NumGoroutine(), Heap: ms.HeapAlloc, Files: openFiles()}
}

// within reports whether u is back to base, within the tolerances for a
// phase of callers.
func (u usage) within(base usage, callers int) bool {
	return u.Goroutines <= base.Goroutines+goroutineSlack &&
		u.Heap <= base.Heap+heapAllowance(callers) &&
		u.Files <= base.Files+fileSlack
}

// heapAllowance is the heap a phase of callers may leave behind.
func heapAllowance(callers int) uint64 { return heapSlack + uint64(callers)*heapPerCaller }

// settle returns the usage once it is back to base, or after limit. A
// goroutine's exit is no event to wait on: the connections' goroutines
// end a little after their connections close, so this polls.
func settle(base usage, callers int, limit time.Duration) usage {
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		u := measure()
		if u.within(base, callers) || time.Now().After(deadline) {
			return u
		}
		<-tick.C
	}
}

// resourceCheck judges the usage after a phase against the one before.
func resourceCheck(slots, callers int, base, after usage) check {
	detail := fmt.Sprintf("goroutines %d → %d (at most +%d), heap %.1f → %.1f MiB (at most +%.0f MiB), open files %d → %d (at most +%d)",
		base.Goroutines, after.Goroutines, goroutineSlack, mib(base.Heap), mib(after.Heap), mib(heapAllowance(callers)), base.Files, after.Files, fileSlack)
	c := check{Name: "resources", Slots: slots, Passed: after.within(base, callers), Detail: detail}
	if !c.Passed {
		c.Detail = "not back to the baseline once the phase was closed: " + detail
	}
	return c
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// warmUp opens what the process opens once, on its first connection, so
// that the baseline holds it: the netpoller's descriptors.
func warmUp() {
	if l, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		l.Close()
	}
}
