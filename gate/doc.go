// Package gate bounds the requests in flight to a shared server, per key, and
// keeps a bounded, visible queue in front of it.
//
// A shared inference server such as llama.cpp with --parallel N serves N
// requests at once and quietly queues the rest. When it restarts, every
// client retries together and that hidden queue piles up. A [Gate] moves the
// queue to our side: each key (say, one upstream server) admits Capacity
// requests at a time, lets at most MaxQueue more wait in strict arrival
// order, and refuses the rest at once with [ErrBusy], so a caller can report
// where it stands or give up instead of waiting behind a pile-up.
//
// The package uses only the standard library and starts no goroutines: a
// waiting request blocks in its caller's goroutine, on a channel, so it also
// works inside a testing/synctest bubble.
package gate
