package cli

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
)

func TestGCPercent(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 1600},        // not yet measured: as 4 MiB
		{4 << 20, 1600},  // 4 MiB + 64 MiB
		{16 << 20, 400},  // 16 MiB + 64 MiB
		{64 << 20, 100},  // doubling is as much as the headroom
		{1 << 30, 100},   // Go's default beyond it
		{100 << 20, 100}, // never less than the default
	} {
		if got := gcPercent(c.live); got != c.want {
			t.Errorf("gcPercent(%d MiB) = %d, want %d", c.live>>20, got, c.want)
		}
	}
}

// gogc is the collector's GOGC now.
func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// collectUntil runs collections until ok holds, for the cleanup that
// follows one to have run, and reports whether it came to hold.
func collectUntil(ok func() bool) bool {
	for range 200 {
		if ok() {
			return true
		}
		runtime.GC()
		runtime.Gosched()
	}
	return ok()
}

// TestTuneGC checks serve's collector setting: a small heap is given the
// headroom, a heap that grows past it goes back to Go's default after
// the next collection, and stop puts back the GOGC there was.
func TestTuneGC(t *testing.T) {
	t.Setenv("GOGC", "")
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	stop := TuneGC()
	if got := gogc(); got <= 100 {
		t.Errorf("GOGC %d with a test's heap; want more than 100, for %d MiB of headroom", got, gcHeadroom>>20)
	}
	big := make([]byte, gcHeadroom+(16<<20))
	for i := range big {
		big[i] = 1 // touched, so that it is live and counted
	}
	if !collectUntil(func() bool { return gogc() == 100 }) {
		t.Errorf("GOGC %d with %d MiB live; want 100, Go's default", gogc(), len(big)>>20)
	}
	runtime.KeepAlive(big)
	big = nil
	if !collectUntil(func() bool { return gogc() > 100 }) {
		t.Errorf("GOGC %d once the big heap was freed; want the headroom back", gogc())
	}
	debug.SetGCPercent(123)
	stop()
	if got := gogc(); got != 100 {
		t.Errorf("GOGC %d after stop; want 100, as before TuneGC", got)
	}
	runtime.GC()
	runtime.GC()
	if got := gogc(); got != 100 {
		t.Errorf("GOGC %d after stop and a collection; want it left at 100", got)
	}
}

// TestTuneGCEnv checks that a GOGC the user set is theirs.
func TestTuneGCEnv(t *testing.T) {
	t.Setenv("GOGC", "50")
	before := debug.SetGCPercent(50)
	defer debug.SetGCPercent(before)
	stop := TuneGC()
	defer stop()
	runtime.GC()
	if got := gogc(); got != 50 {
		t.Errorf("GOGC %d with GOGC=50 in the environment; want 50", got)
	}
}
