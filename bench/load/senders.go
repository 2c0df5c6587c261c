package main

import "sync"

// senders are the open loop's client goroutines: long-lived, at most max
// of them, and the one that went idle last sends next.
//
// A goroutine per request would start each on a stack that Go sizes
// from the stacks it scanned at its last collection, so whichever target
// was running then would set how often the client's stacks grow, and
// each growth copies the stack on the request's path: in one profile at
// 2,000/s, 12 µs a request of client CPU for the gateway's rounds against
// 6 µs for the proxy's. A sender that has sent once keeps its stack, and
// the last one idle is the likeliest to still have it grown.
type senders struct {
	mu   sync.Mutex
	all  []*sender
	idle []*sender // the last one idle at the end
	max  int
	wg   sync.WaitGroup // the senders' goroutines
}

type sender struct {
	work chan func()
}

func newSenders(max int) *senders { return &senders{max: max} }

// send runs f on an idle sender, starting one if all are busy and
// fewer than max run. It reports false, with f not run, when max are
// busy.
func (p *senders) send(f func()) bool {
	p.mu.Lock()
	var s *sender
	switch {
	case len(p.idle) > 0:
		s = p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
	case len(p.all) < p.max:
		s = &sender{work: make(chan func())}
		p.all = append(p.all, s)
		p.wg.Go(func() { p.loop(s) })
	default:
		p.mu.Unlock()
		return false
	}
	p.mu.Unlock()
	s.work <- f
	return true
}

func (p *senders) loop(s *sender) {
	for f := range s.work {
		f()
		p.mu.Lock()
		p.idle = append(p.idle, s)
		p.mu.Unlock()
	}
}

// close ends the senders. It is called once no send is in progress and
// none will come; a sender still finishing its last f ends after it.
func (p *senders) close() {
	p.mu.Lock()
	all := p.all
	p.all, p.idle = nil, nil
	p.mu.Unlock()
	for _, s := range all {
		close(s.work)
	}
	p.wg.Wait()
}
