package main

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"time"
)

// userHZ is the unit of /proc/stat: USER_HZ, 100 on every Linux
// architecture Go supports.
const userHZ = 100

// machineBusy returns the CPU time all processes have used since boot,
// from /proc/stat's first line: user, nice, system, irq, softirq and
// steal (proc(5)); idle and iowait are not busy, and guest time is
// counted in user already.
func machineBusy() (time.Duration, bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, false
	}
	fields := bytes.Fields(sc.Bytes())
	if len(fields) < 9 || string(fields[0]) != "cpu" {
		return 0, false
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		n, err := strconv.ParseInt(string(fields[i]), 10, 64)
		if err != nil {
			return 0, false
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, true
}
