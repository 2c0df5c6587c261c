//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package cli

import "syscall"

// lowerPriority gives this process the lowest CPU priority (nice 19).
func lowerPriority() { syscall.Setpriority(syscall.PRIO_PROCESS, 0, 19) }
