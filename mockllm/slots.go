package mockllm

import (
	"context"
	"slices"
	"sync"
)

// slots are llama.cpp's parallel sequences: each model request holds one
// for its whole response, and the others wait. Like llama.cpp, which
// defers a task until a slot is free, a request waits rather than fails;
// waiters are served in arrival order, but one that wants a particular
// slot does not hold up one that can take any free slot.
type slots struct {
	mu      sync.Mutex // guards task and waiters
	task    []int      // the task each slot serves; 0 if idle
	waiters []*slotWaiter
}

type slotWaiter struct {
	want  int      // the slot wanted; -1 for any
	task  int      // the task to serve
	ready chan int // receives the slot granted
}

func newSlots(n int) *slots { return &slots{task: make([]int, n)} }

// free returns a free slot that a waiter for want may take, or -1.
func (s *slots) free(want int) int {
	if want >= 0 {
		if s.task[want] == 0 {
			return want
		}
		return -1
	}
	return slices.Index(s.task, 0)
}

// acquire waits for a slot (want, or any if want is -1) and returns it.
// On cancellation it leaves the queue, or gives back a slot granted in
// the meantime.
func (s *slots) acquire(ctx context.Context, want, task int) (int, error) {
	s.mu.Lock()
	// Every release grants all the waiters it can, so a free slot here
	// is one that no waiter wants: taking it jumps no queue.
	if id := s.free(want); id >= 0 {
		s.task[id] = task
		s.mu.Unlock()
		return id, nil
	}
	w := &slotWaiter{want: want, task: task, ready: make(chan int, 1)}
	s.waiters = append(s.waiters, w)
	s.mu.Unlock()

	select {
	case id := <-w.ready:
		return id, nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	if i := slices.Index(s.waiters, w); i >= 0 {
		s.waiters = slices.Delete(s.waiters, i, i+1)
		s.mu.Unlock()
		return 0, ctx.Err()
	}
	s.mu.Unlock()
	// The grant raced the cancellation: give the slot back.
	s.release(<-w.ready)
	return 0, ctx.Err()
}

// release frees slot id and grants it, and any other free slot, to the
// waiters that can take them, oldest first.
func (s *slots) release(id int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.task[id] = 0
	kept := s.waiters[:0]
	for _, w := range s.waiters {
		if id := s.free(w.want); id >= 0 {
			s.task[id] = w.task
			w.ready <- id
			continue
		}
		kept = append(kept, w)
	}
	clear(s.waiters[len(kept):])
	s.waiters = kept
}

// slotState is one entry of GET /slots.
type slotState struct {
	ID           int  `json:"id"`
	IDTask       int  `json:"id_task"`
	NCtx         int  `json:"n_ctx"`
	IsProcessing bool `json:"is_processing"`
}

func (s *slots) states() []slotState {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]slotState, len(s.task))
	for i, t := range s.task {
		out[i] = slotState{ID: i, IDTask: t - 1, NCtx: 4096, IsProcessing: t != 0}
	}
	return out
}
