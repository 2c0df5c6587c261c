//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package journalproc

import (
	"os"
	"syscall"
)

// CanLowerPriority says the writer process can lower its priority here.
const CanLowerPriority = true

// lowerPriority gives this process the lowest CPU priority (nice 19).
func lowerPriority() { syscall.Setpriority(syscall.PRIO_PROCESS, 0, 19) }

// self is the path that runs this binary again.
func self() (string, error) { return os.Executable() }
