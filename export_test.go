package outlast

import "time"

// JitterAt exposes Jitter.at, the jitter without its randomness.
func JitterAt(j Jitter, w time.Duration, serverSet bool, u float64) time.Duration {
	return j.at(w, serverSet, u)
}
