package gate

// queue is a FIFO of waiting tickets, linked through the tickets themselves
// so that joining, leaving from any position (a cancellation) and popping are
// all O(1) and allocate nothing.
type queue struct {
	head, tail *ticket
	len        int
}

func (q *queue) push(t *ticket) {
	t.prev, t.next = q.tail, nil
	if q.tail == nil {
		q.head = t
	} else {
		q.tail.next = t
	}
	q.tail = t
	q.len++
}

// pop removes and returns the front ticket, or nil if q is empty.
func (q *queue) pop() *ticket {
	t := q.head
	if t != nil {
		q.remove(t)
	}
	return t
}

// remove unlinks t, which must be in q.
func (q *queue) remove(t *ticket) {
	if t.prev == nil {
		q.head = t.next
	} else {
		t.prev.next = t.next
	}
	if t.next == nil {
		q.tail = t.prev
	} else {
		t.next.prev = t.prev
	}
	t.prev, t.next = nil, nil
	q.len--
}
