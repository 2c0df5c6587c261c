package main

import (
	"runtime"
	"time"
)

// cost is what the process spent over some requests: CPU time and heap
// allocations. Only one target is driven at a time, so a target's cost
// is the whole process's, and direct's is the client's and upstream's
// share, which the others' include too. It also records what the rest of
// the machine spent meanwhile, which tells a disturbed run.
type cost struct {
	cpu     time.Duration // this process's
	cpuOK   bool          // the platform can tell the process's CPU time
	mallocs uint64
	bytes   uint64
	busy    time.Duration // the whole machine's CPU time, every process's
	busyOK  bool          // the platform can tell it
	wall    time.Duration
	at      time.Time // when a sample was taken
	// procs is each deployed target's own process's CPU time (with its
	// children's), in the targets' order, when they are deployed: cpu
	// counts them all.
	procs []time.Duration
}

// sampleCost reads the totals so far. ReadMemStats stops the world
// briefly: it is called only between rounds.
func sampleCost() cost {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	cpu, ok := processCPU()
	busy, busyOK := machineBusy()
	return cost{cpu: cpu, cpuOK: ok, mallocs: ms.Mallocs, bytes: ms.TotalAlloc, busy: busy, busyOK: busyOK, at: time.Now()}
}

// since returns the cost from before to c.
func (c cost) since(before cost) cost {
	return cost{
		cpu:     c.cpu - before.cpu,
		cpuOK:   c.cpuOK && before.cpuOK,
		mallocs: c.mallocs - before.mallocs,
		bytes:   c.bytes - before.bytes,
		busy:    c.busy - before.busy,
		busyOK:  c.busyOK && before.busyOK,
		wall:    c.at.Sub(before.at),
		procs:   minus(c.procs, before.procs),
	}
}

// minus returns a less b, element by element, or nil unless the two are
// as long.
func minus(a, b []time.Duration) []time.Duration {
	if len(a) != len(b) || a == nil {
		return nil
	}
	d := make([]time.Duration, len(a))
	for i := range a {
		d[i] = a[i] - b[i]
	}
	return d
}

func (c *cost) add(d cost) {
	// The platform can tell, or it cannot: the flags are the same each time.
	c.cpuOK, c.busyOK = d.cpuOK, d.busyOK
	c.cpu += d.cpu
	c.mallocs += d.mallocs
	c.bytes += d.bytes
	c.busy += d.busy
	c.wall += d.wall
	if c.procs == nil {
		c.procs = make([]time.Duration, len(d.procs))
	}
	for i := range min(len(c.procs), len(d.procs)) {
		c.procs[i] += d.procs[i]
	}
}

// foreign returns the share of the machine's CPU capacity that other
// processes used over c, and whether the platform can tell.
func (c cost) foreign() (float64, bool) {
	if !c.cpuOK || !c.busyOK || c.wall <= 0 {
		return 0, false
	}
	other := max(c.busy-c.cpu, 0)
	return float64(other) / (float64(c.wall) * float64(runtime.NumCPU())), true
}

// round runs one round of f on s and adds its cost. A round in which
// other processes took more than MaxOther of the machine is run again,
// its requests forgotten, while the redo budget lasts: a compile that
// lands on one target's rounds would otherwise decide the ratios.
func (b *bench) round(s *series, f func() error) error {
	for {
		settle()
		m := s.mark()
		before := b.st.sampleCost()
		err := f()
		d := b.st.sampleCost().since(before)
		if err != nil {
			return err
		}
		if b.redo(d) {
			s.reset(m)
			continue
		}
		s.cost.add(d)
		s.endRound()
		return nil
	}
}

// redo says whether a round that cost d is to be run again because other
// processes took more than MaxOther of the machine meanwhile, and charges
// the redo budget if so.
func (b *bench) redo(d cost) bool {
	share, ok := d.foreign()
	if !ok || b.cfg.MaxOther <= 0 || share <= b.cfg.MaxOther {
		return false
	}
	if b.redoLeft <= 0 {
		b.kept++
		return false
	}
	b.redoLeft -= d.wall
	b.redone++
	return true
}
