package main

import (
	"sync"
	"testing"
	"testing/synctest"
)

// TestSendersBoundAndReuse checks the open loop's senders: a send while
// max are busy is refused, not queued; a sender that finished is used
// again, the last one idle first, rather than a new one started.
func TestSendersBoundAndReuse(t *testing.T) {
	synctest.Test(t, testSendersBoundAndReuse)
}

func testSendersBoundAndReuse(t *testing.T) {
	p := newSenders(2)
	defer p.close()
	release := make(chan struct{})
	var busy, done sync.WaitGroup
	for range 2 {
		busy.Add(1)
		done.Add(1)
		if !p.send(func() { busy.Done(); <-release; done.Done() }) {
			t.Fatal("a send with a sender free was refused")
		}
	}
	busy.Wait()
	if p.send(func() { t.Error("a send over the bound ran") }) {
		t.Fatal("a send with both senders busy was taken")
	}
	close(release)
	done.Wait()
	synctest.Wait() // both back among the idle, waiting for work
	p.mu.Lock()
	if len(p.idle) != 2 {
		t.Fatalf("%d senders idle, want 2", len(p.idle))
	}
	last := p.idle[1]
	p.mu.Unlock()
	ran := make(chan struct{})
	if !p.send(func() { close(ran) }) {
		t.Fatal("a send with both senders idle was refused")
	}
	<-ran
	synctest.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.all) != 2 {
		t.Errorf("%d senders started, want the 2 there were", len(p.all))
	}
	if len(p.idle) != 2 || p.idle[0] == last {
		t.Error("the send went to the sender idle longest, not the last one idle")
	}
}
