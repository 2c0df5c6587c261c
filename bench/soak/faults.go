package main

import (
	"encoding/binary"
	"hash/fnv"
	"strconv"
)

// A fault is how the fake upstream answers one attempt.
type fault int

const (
	faultNone       fault = iota // the completion
	fault503                     // 503, OpenAI's error JSON
	fault429                     // 429 with Retry-After: 1
	fault529                     // Anthropic's overloaded_error
	faultReset                   // the connection reset (TCP RST) before any response
	faultClose                   // a 200's headers, then the connection closed before the first byte
	faultErrorEvent              // a 200 event stream that opens with Anthropic's overloaded error (streams only)
)

var faultNames = [...]string{"none", "503", "429", "529", "reset", "close", "error-event"}

func (f fault) String() string { return faultNames[f] }

// faults returns the faults a request may meet: an error event only where
// a stream is asked for, since the gateway reads a first event only from
// an event stream.
func faults(stream bool) []fault {
	all := []fault{fault503, fault429, fault529, faultReset, faultClose, faultErrorEvent}
	if stream {
		return all
	}
	return all[:len(all)-1]
}

// pick returns the fault of attempt n of the request tagged tag. It is a
// function of the seed, the tag and n alone, not of the order attempts
// arrive in, so that a run's faults are the same each time it is run with
// the same seed.
func pick(seed uint64, rate float64, tag string, n int, stream bool) fault {
	h := hash(seed, tag+"#"+strconv.Itoa(n))
	if unit(h) >= rate {
		return faultNone
	}
	fs := faults(stream)
	return fs[mix(h)%uint64(len(fs))]
}

// streams reports whether the request tagged tag streams.
func streams(seed uint64, share float64, tag string) bool {
	return unit(hash(seed^0x9e3779b97f4a7c15, tag)) < share
}

// hash is FNV-1a of the seed and s, mixed so that its high bits are
// uniform.
func hash(seed uint64, s string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	h.Write(b[:])
	h.Write([]byte(s))
	return mix(h.Sum64())
}

// mix is SplitMix64's finalizer.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// unit maps h to [0, 1).
func unit(h uint64) float64 { return float64(h>>11) / (1 << 53) }
