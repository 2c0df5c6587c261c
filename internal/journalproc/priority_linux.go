package journalproc

import (
	"os"
	"strconv"
	"syscall"
)

// CanLowerPriority says the writer process can lower its priority here.
const CanLowerPriority = true

// lowerPriority gives this process the lowest CPU priority (nice 19). On
// Linux a priority is a thread's, so it sets every thread's; threads made
// later are made by these and inherit it.
func lowerPriority() {
	for range 2 { // a thread started during the first pass gets the second
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			syscall.Setpriority(syscall.PRIO_PROCESS, 0, 19)
			return
		}
		for _, t := range tasks {
			if tid, err := strconv.Atoi(t.Name()); err == nil {
				syscall.Setpriority(syscall.PRIO_PROCESS, tid, 19)
			}
		}
	}
}

// self is the path that runs this binary again: the running file, even if
// it was replaced or removed since.
func self() (string, error) { return "/proc/self/exe", nil }
