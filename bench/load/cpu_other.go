//go:build !unix

package main

import "time"

// processCPU reports that this platform cannot tell the process's CPU
// time: the cost table then shows n/a.
func processCPU() (time.Duration, bool) { return 0, false }
