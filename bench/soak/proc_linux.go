package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// raiseFileLimit makes sure the process may hold need open files, raising
// its soft RLIMIT_NOFILE if it must. Go raises the soft limit to the hard
// one at start, so this fails only when the hard limit is too low, and
// says so.
func raiseFileLimit(need uint64) error {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return fmt.Errorf("reading RLIMIT_NOFILE: %w", err)
	}
	if rl.Cur >= need {
		return nil
	}
	if rl.Max < need {
		return usageError{Err: fmt.Errorf("--callers needs %d open files (two per caller, and some), and RLIMIT_NOFILE's hard limit is %d: raise it, or give fewer callers", need, rl.Max)}
	}
	rl.Cur = need
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return fmt.Errorf("raising RLIMIT_NOFILE to %d: %w", need, err)
	}
	return nil
}

// openFiles counts the process's open file descriptors.
func openFiles() int {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(fds) - 1 // the directory's own, open while it is read
}

// resetPeakRSS starts the peak RSS afresh (proc(5), clear_refs: 5), and
// reports whether it could.
func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// peakRSS returns the peak resident set size, VmHWM, in bytes, or -1.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
			kb, err := strconv.ParseInt(string(bytes.TrimSuffix(bytes.TrimSpace(v), []byte(" kB"))), 10, 64)
			if err != nil {
				return -1
			}
			return kb << 10
		}
	}
	return -1
}
