//go:build !linux

package main

import "time"

// machineBusy reports that this platform cannot tell the machine's CPU
// time without /proc/stat: the report then leaves out other processes'
// share.
func machineBusy() (time.Duration, bool) { return 0, false }
