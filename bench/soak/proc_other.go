//go:build !linux

package main

// raiseFileLimit leaves the limit as it is: on this platform a run that
// needs more files than it may open fails at the first refused
// connection, which the answers check reports.
func raiseFileLimit(need uint64) error { return nil }

// openFiles reports that this platform cannot tell.
func openFiles() int { return -1 }

// resetPeakRSS reports that this platform cannot start the peak afresh.
func resetPeakRSS() bool { return false }

// peakRSS reports that this platform cannot tell.
func peakRSS() int64 { return -1 }
