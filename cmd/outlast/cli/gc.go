package cli

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// gcHeadroom is how far serve lets its heap grow past what it holds
// before the next collection, when that is more than Go's default of
// the heap's own size (GOGC=100).
//
// A gateway holds a few MiB (the timeline's requests, the journal's
// batch, its connections) and allocates about 12 KiB a request, so at
// GOGC=100 it would collect some ten times a second at 2,000
// requests/s, and every collection takes a share of two cores from the
// requests in flight: most of the gateway's p99 over a bare proxy's was
// that. With the headroom it collects once per 64 MiB allocated, and a
// heap that grows past 64 MiB is collected as Go's default would.
const gcHeadroom = 64 << 20

// TuneGC sets the collector's GOGC after each collection so that the next
// comes when the heap has grown by gcHeadroom or doubled, whichever is
// more, until stop, which puts back the GOGC it found. A GOGC set in the
// environment is left alone. outlast serve runs with it, and so do the
// benchmarks that measure the gateway as serve runs it.
func TuneGC() (stop func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	t := &gcTuner{sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	t.prev = debug.SetGCPercent(gcPercent(t.live()))
	t.arm()
	return t.stop
}

// gcPercent is the GOGC that makes the heap goal live+gcHeadroom, or
// Go's default if that is more. A heap not yet measured counts as 4 MiB.
func gcPercent(live uint64) int {
	live = max(live, 4<<20)
	return int(max(100, gcHeadroom*100/live))
}

type gcTuner struct {
	mu      sync.Mutex // guards stopped and sample, and orders SetGCPercent
	stopped bool
	sample  []metrics.Sample
	prev    int // the GOGC before TuneGC
}

// sentinel is an object that only a collection frees: its cleanup marks
// the end of one. A 32-byte array is past the tiny allocator, whose
// objects may be freed late or never.
type sentinel [32]byte

// arm asks to hear of the next collection.
func (t *gcTuner) arm() {
	runtime.AddCleanup(new(sentinel), (*gcTuner).collected, t)
}

// collected runs after a collection: it sets GOGC for the heap that
// survived it, and asks to hear of the next.
func (t *gcTuner) collected() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	debug.SetGCPercent(gcPercent(t.liveLocked()))
	t.arm()
}

func (t *gcTuner) live() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.liveLocked()
}

func (t *gcTuner) liveLocked() uint64 {
	metrics.Read(t.sample)
	if t.sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return t.sample[0].Value.Uint64()
}

func (t *gcTuner) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped {
		t.stopped = true
		debug.SetGCPercent(t.prev)
	}
}
