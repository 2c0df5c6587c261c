//go:build race

package gateway

// raceOn says the race detector is on: sync.Pool then drops what it is
// given at random, and counts of allocations mean nothing.
const raceOn = true
