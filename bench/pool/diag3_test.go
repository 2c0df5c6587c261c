package main

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/outlast-llm/outlast/bench/internal/bubble"
)

func TestDiag3(t *testing.T) {
	c := defaultConfig()
	c.Seed, _ = strconv.ParseUint(os.Getenv("SEED"), 10, 64)
	c.validate()
	w := newWorkload(c)
	runs := runAll(bubble.For(t), c, w, policies()[:3])
	for _, r := range runs {
		start := r.Members[0].Admissions[0].At
		for _, at := range []int{6, 7} {
			cut := start.Add(time.Duration(at) * c.LevelDuration)
			line := ""
			for _, m := range r.Members {
				spec := specOf(t, m.Name)
				rq, tk := float64(spec.RPM), float64(spec.TPM)
				last := start
				for _, a := range m.Admissions {
					if a.At.After(cut) {
						break
					}
					el := a.At.Sub(last).Minutes()
					rq = min(float64(spec.RPM), rq+el*float64(spec.RPM)) - 1
					tk = min(float64(spec.TPM), tk+el*float64(spec.TPM)) - float64(a.Cost)
					last = a.At
				}
				el := cut.Sub(last).Minutes()
				rq = min(float64(spec.RPM), rq+el*float64(spec.RPM))
				tk = min(float64(spec.TPM), tk+el*float64(spec.TPM))
				line += fmt.Sprintf(" %s r%.0f t%.0f", m.Name, rq, tk)
			}
			t.Logf("%-13s buckets at end of step %d:%s", r.Policy.Name, at, line)
		}
		for l := 4; l <= 8; l++ {
			var n, ok [3]int
			var oc [6]int
			for _, res := range r.Results {
				if res.Level != l {
					continue
				}
				n[res.Class]++
				oc[res.Outcome]++
				if res.Outcome == served {
					ok[res.Class]++
				}
			}
			t.Logf("%-13s step %d small %3d/%3d med %3d/%3d large %3d/%3d outcomes %v", r.Policy.Name, l+1, ok[0], n[0], ok[1], n[1], ok[2], n[2], oc)
		}
	}
	_ = fmt.Sprint
}
