//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package cli

import (
	"os"
	"syscall"
)

// canLowerPriority says lowerPriority works here.
const canLowerPriority = true

// lowerPriority gives this process the lowest CPU priority (nice 19).
func lowerPriority() { syscall.Setpriority(syscall.PRIO_PROCESS, 0, 19) }

// self is the path that runs this binary again.
func self() (string, error) { return os.Executable() }
