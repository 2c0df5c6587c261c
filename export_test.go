package outlast

import "time"

// JitterAt exposes Jitter.at, the jitter without its randomness.
func JitterAt(j Jitter, w time.Duration, serverSet bool, u float64) time.Duration {
	return j.at(w, serverSet, u)
}

// IsContextTooLong exposes isContextTooLong, the reading of a 400's body
// that moves a request to its fallback.
var IsContextTooLong = isContextTooLong
