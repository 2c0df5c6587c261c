package journalproc

import (
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

// CanLowerPriority says the writer process can lower its priority here.
const CanLowerPriority = true

// lowerPriority gives this process the lowest CPU priority: the SCHED_IDLE
// policy, under which any other process's thread that wakes takes the
// CPU from it at once, rather than after the scheduler's granularity, as
// it would from nice 19, which it also sets (the policy where SCHED_IDLE
// is refused). On Linux both are a thread's, so it sets every thread's;
// threads made later are made by these and inherit them.
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
				setIdlePolicy(tid)
			}
		}
	}
}

// self is the path that runs this binary again: the running file, even if
// it was replaced or removed since.
func self() (string, error) { return "/proc/self/exe", nil }

// schedIdle is Linux's SCHED_IDLE policy (sched.h).
const schedIdle = 5

// setIdlePolicy sets thread tid's policy to SCHED_IDLE, which an
// unprivileged process may always do to its own threads.
func setIdlePolicy(tid int) error {
	var param struct{ priority int32 } // struct sched_param; 0 for SCHED_IDLE
	_, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER, uintptr(tid), schedIdle, uintptr(unsafe.Pointer(&param)))
	if errno != 0 {
		return errno
	}
	return nil
}
